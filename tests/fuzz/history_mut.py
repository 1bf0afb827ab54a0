"""History-database mutations: a ``tracelens history`` database of two runs of a bundled sample, changed by
a plan (as traces are, :mod:`.kineto_mut`), then read by ``history list``, ``history show`` or a gate against
it. SQLite keeps any value in any column, so the plan writes values of every storage class where tracelens
reads numbers, text, nothing at all, drops tables and columns, changes the schema record and damages the
file's bytes.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

TABLES = {"runs": ["id", "label", "commit", "created_at", "source", "ranks", "steps", "overlap_pct",
                   "exposed_comm_fraction", "comm_ns", "exposed_comm_ns", "pattern", "worst_rank", "critical",
                   "warnings"],
          "rank_steps": ["run_id", "rank", "step", "complete", "start_ns", "duration_ns", "comm_ns", "overlap_ns",
                         "exposed_comm_ns", "idle_ns", "overlap_pct", "exposed_comm_fraction", "pattern"],
          "meta": ["key", "value"]}
# Values of every storage class: text (numbers as text too), blobs (hex), NULL, extreme integers and reals.
VALUES = ["abc", "", "12", "12.5", "-1", "1e400", "NaN", "main", ["blob", "00ff"], ["blob", ""], None, 0, -1,
          2**63 - 1, -(2**63), 1.5, 1e308, -0.0, "tracelens.history/2", "\u00e9\u4e2d", "x" * 300]
COMMANDS = ["list", "list-json", "show", "show-json", "gate"]
SAMPLE = "wfbp_100"          # the bundled run both history rows are of (sample_traces/)


def plan(rng: random.Random) -> list:
    """1 to 3 changes, then the command that reads the database."""
    ops = []
    for _ in range(rng.choice([1, 1, 2, 3])):
        kind = rng.choices(["set", "set_one", "drop_table", "drop_column", "delete", "schema", "bytes"],
                           weights=[10, 10, 1, 2, 2, 2, 2])[0]
        table = rng.choice(list(TABLES))
        if kind in ("set", "set_one"):
            ops.append([kind, table, rng.choice(TABLES[table]), rng.choice(VALUES)])
        elif kind == "drop_column":
            ops.append([kind, table, rng.choice(TABLES[table])])
        elif kind in ("drop_table", "delete"):
            ops.append([kind, table])
        elif kind == "schema":
            ops.append([kind, rng.choice(["tracelens.history/2", "", None, 1, "tracelens.report/1"])])
        else:
            ops.append([kind, rng.choice(["truncate", "flip", "empty"]), rng.random()])
    ops.append(["command", rng.choice(COMMANDS)])
    return ops


def template(workdir: Path, samples: Path) -> Path:
    """The unchanged database (made once per process): two runs of the sample, labelled main."""
    path = workdir / "template.db"
    if not path.exists():
        import tracelens
        from tracelens.history_db import add_run, open_db

        rep = tracelens.report(str(samples / SAMPLE))
        with open_db(path, create=True) as db:
            add_run(db, rep, label="main", commit="a" * 40, source=SAMPLE)
            add_run(db, rep, label="main", commit="b" * 40, source=SAMPLE)
    return path


def write(ops: list, template_db: Path, folder: Path) -> Path:
    """The case's database in ``folder``: the template with ``ops`` applied."""
    path = folder / "history.db"
    shutil.copy(template_db, path)
    con = sqlite3.connect(path)
    damage = []
    for op in ops:
        kind = op[0]
        try:
            if kind in ("set", "set_one"):
                value = bytes.fromhex(op[3][1]) if isinstance(op[3], list) else op[3]
                where = " WHERE rowid = (SELECT min(rowid) FROM {t})" if kind == "set_one" else ""
                con.execute(f'UPDATE {op[1]} SET "{op[2]}" = ?' + where.format(t=op[1]), (value,))
            elif kind == "drop_column":
                con.execute(f'ALTER TABLE {op[1]} DROP COLUMN "{op[2]}"')
            elif kind == "drop_table":
                con.execute(f"DROP TABLE {op[1]}")
            elif kind == "delete":
                con.execute(f"DELETE FROM {op[1]}")
            elif kind == "schema":
                con.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (op[1],))
            elif kind == "bytes":
                damage.append(op)
        except sqlite3.Error:       # a column that is a key or indexed, a table already dropped: not this case
            pass
    con.commit()
    con.close()
    for _, how, where in damage:
        data = bytearray(path.read_bytes())
        at = int(len(data) * where)
        if how == "truncate":
            data = data[:at]
        elif how == "flip":
            for k in range(at, min(len(data), at + 64)):
                data[k] ^= 0x5A
        else:
            data = bytearray()
        path.write_bytes(bytes(data))
    return path


def argv(ops: list, db: Path, samples: Path) -> list[str]:
    """The command the case runs on its database."""
    command = next((op[1] for op in ops if op[0] == "command"), "list")
    if command.startswith("list"):
        return ["history", "list", "--db", str(db)] + (["--format", "json"] if command.endswith("json") else [])
    if command.startswith("show"):
        return ["history", "show", "1", "--db", str(db)] + (["--format", "json"] if command.endswith("json") else [])
    return ["gate", str(samples / SAMPLE), "--history", str(db), "--against", "main", "--max-overlap-drop", "1",
            "--no-config", "--format", "json"]
