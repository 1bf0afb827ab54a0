"""The run history: a SQLite database (managed with sqlite-utils) of past reports, for relative gates
and the dashboard.

Tables (schema ``tracelens.history/1``, recorded in ``meta``):

- ``runs``: one row per added run — label, commit, UTC time, where it came from, and the summary metrics.
- ``rank_steps``: one row per rank x step of a run (``run_id`` refers to ``runs.id``) with the step metrics.
- ``meta``: key/value pairs, e.g. the schema version.

Adds are single ``BEGIN IMMEDIATE`` transactions with a generous busy timeout, so CI jobs appending at the
same time queue for the write lock instead of failing or losing rows; the "latest" run of a label is the
last one added (row id order, not wall-clock time, which differs between CI machines).
"""

from __future__ import annotations

import math
import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Optional

import numpy as np
import pandas as pd
import sqlite_utils

from .errors import InputError, UsageError
from .gating import STEP_COLUMNS, Baseline
from .contract import Report

SCHEMA = "tracelens.history/1"
BUSY_TIMEOUT_S = 120.0

RUN_COLUMNS = {
    "id": int, "label": str, "commit": str, "created_at": str, "source": str, "tool_version": str,
    "ranks": int, "steps": int, "overlap_pct": float, "exposed_comm_fraction": float, "comm_ns": int,
    "exposed_comm_ns": int, "pattern": str, "worst_rank": int, "critical": int, "warnings": int,
}
STEP_TABLE_COLUMNS = {
    "run_id": int, "rank": int, "step": int, "complete": int, "start_ns": int, "duration_ns": int,
    "compute_ns": int, "comm_ns": int, "overlap_ns": int, "exposed_comm_ns": int, "idle_ns": int,
    "overlap_pct": float, "exposed_comm_fraction": float, "pattern": str,
}


@contextmanager
def open_db(path: str | Path, *, create: bool) -> Iterator[sqlite_utils.Database]:
    """The history database at ``path``; created (with its tables) on first use when ``create``."""
    p = Path(path)
    # SQLite writes the database and its journals in place, following links: a link at any of their paths
    # is refused, so that a history never writes into a file it was pointed at by one.
    for name in (p, *(p.with_name(p.name + end) for end in ("-journal", "-wal", "-shm"))):
        if name.is_symlink():
            raise UsageError("a symbolic link: tracelens never writes a history through one (name the file "
                             "itself)", path=str(name))
        # SQLite opens a FIFO there and waits in C for a writer, where no signal reaches it.
        if name.exists() and not (name.is_file() or name.is_dir()):
            raise UsageError("not a regular file: tracelens opens a history only as one", path=str(name))
        # Written in place, a file of several names changes under all of them (an input, a file elsewhere).
        if create and name.is_file() and name.stat().st_nlink > 1:
            raise UsageError(f"a hard link ({name.stat().st_nlink} names): tracelens never adds to a history "
                             "whose file has other names (copy it first)", path=str(name))
    if not p.exists():
        if not create:
            raise UsageError("no such history database", path=str(path))
        if not p.parent.exists():
            raise UsageError("the folder for the history database does not exist", path=str(path))
    try:
        conn = sqlite3.connect(str(p), timeout=BUSY_TIMEOUT_S)
    except sqlite3.Error as exc:
        raise InputError(f"cannot open history database: {exc}", path=str(path)) from None
    try:
        db = sqlite_utils.Database(conn)
        if create:
            with _write(db):
                _ensure_schema(db)
        _check_schema(db)
        yield db
    except (sqlite3.DatabaseError, sqlite_utils.db.AlterError) as exc:
        raise InputError(f"cannot use history database: {exc}", path=str(path)) from None
    except InputError as exc:
        if exc.path is None:
            exc.path = str(path)
        raise
    finally:
        conn.close()


@contextmanager
def _write(db: sqlite_utils.Database) -> Iterator[None]:
    """One write transaction that takes the lock up front (sqlite-utils nests its own savepoints in it)."""
    db.conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        db.conn.execute("ROLLBACK")
        raise
    db.conn.execute("COMMIT")


def _ensure_schema(db: sqlite_utils.Database) -> None:
    tables = set(db.table_names())
    db["meta"].create({"key": str, "value": str}, pk="key", if_not_exists=True)
    found = db.execute("select value from meta where key = 'schema'").fetchone()
    if found is None and tables:
        # Another program's database (or ours, damaged): adding our tables and rows would alter its data.
        raise InputError("not a tracelens history database (it has tables but no tracelens schema record)")
    if found is None:
        db["meta"].insert({"key": "schema", "value": SCHEMA})
    elif found[0] != SCHEMA:
        raise InputError(f"history schema {found[0]!r} is not the {SCHEMA!r} this version reads")
    db["runs"].create(RUN_COLUMNS, pk="id", if_not_exists=True)
    db["rank_steps"].create(STEP_TABLE_COLUMNS, foreign_keys=[("run_id", "runs", "id")], if_not_exists=True)
    db["runs"].create_index(["label", "id"], if_not_exists=True)
    db["rank_steps"].create_index(["run_id", "rank", "step"], if_not_exists=True)


def _check_schema(db: sqlite_utils.Database) -> None:
    """A database this version can read: our schema record, and every column the queries name."""
    tables = set(db.table_names())
    if "runs" not in tables:
        raise InputError("not a tracelens history database (no runs table)")
    found = (db.execute("select value from meta where key = 'schema'").fetchone()
             if "meta" in tables and {"key", "value"} <= {c.name for c in db["meta"].columns} else None)
    if found is None:
        raise InputError("not a tracelens history database (no schema record in its meta table)")
    if found[0] != SCHEMA:
        raise InputError(f"history schema {found[0]!r} is not the {SCHEMA!r} this version reads")
    for table, wanted in (("runs", RUN_COLUMNS), ("rank_steps", STEP_TABLE_COLUMNS)):
        have = {c.name for c in db[table].columns} if table in tables else set()
        missing = [c for c in wanted if c not in have]
        if missing:
            raise InputError(f"history table {table} lacks column(s) {', '.join(missing)}")


def add_run(db: sqlite_utils.Database, report: Report, *, label: str, commit: Optional[str] = None,
            source: str = "", when: Optional[datetime] = None) -> int:
    """Append one run (summary row + rank x step rows) in one transaction; returns its id."""
    s = report.summary
    created = (when or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat(timespec="seconds")
    run = {
        "label": label, "commit": commit, "created_at": created, "source": source,
        "tool_version": report.tool.version, "ranks": s.ranks, "steps": s.steps, "overlap_pct": s.overlap_pct,
        "exposed_comm_fraction": s.exposed_comm_fraction, "comm_ns": s.comm_ns,
        "exposed_comm_ns": s.exposed_comm_ns, "pattern": s.pattern, "worst_rank": s.worst_rank,
        "critical": sum(d.severity == "critical" for d in report.diagnoses),
        "warnings": sum(w.count for w in report.warnings),
    }
    steps = [{
        "rank": r.rank, "step": st.step, "complete": int(st.complete), "start_ns": st.start_ns,
        "duration_ns": st.duration_ns, "compute_ns": st.compute_ns, "comm_ns": st.comm_ns,
        "overlap_ns": st.overlap_ns, "exposed_comm_ns": st.exposed_comm_ns, "idle_ns": st.idle_ns,
        "overlap_pct": st.overlap_pct, "exposed_comm_fraction": st.exposed_comm_fraction, "pattern": st.pattern,
    } for r in report.ranks for st in r.steps]
    with _write(db):
        run_id = db["runs"].insert(run).last_pk
        db["rank_steps"].insert_all([{"run_id": run_id, **row} for row in steps], batch_size=500)
    return int(run_id)


def list_runs(db: sqlite_utils.Database, label: Optional[str] = None, limit: int = 20) -> list[dict]:
    """The newest ``limit`` runs (optionally of one label), newest first."""
    where, args = ("label = ?", [label]) if label else (None, [])
    return _numbers_checked(list(db["runs"].rows_where(where, args, order_by="id desc", limit=limit)))


def get_run(db: sqlite_utils.Database, run_id: int) -> dict:
    rows = _numbers_checked(list(db["runs"].rows_where("id = ?", [run_id])))
    if not rows:
        raise UsageError(f"no run with id {run_id} in the history database")
    return rows[0]


def _numbers_checked(runs: list[dict]) -> list[dict]:
    """The runs, or InputError (exit 3) naming the first value that is not a number where one belongs: SQLite
    keeps text in a REAL or INTEGER column, and a run shown or compared with it would be wrong or fail."""
    for run in runs:
        for col, kind in RUN_COLUMNS.items():
            value = run.get(col)
            if value is None:
                continue
            if kind is str:
                # A BLOB in a text column (SQLite keeps any type anywhere) would reach the table as bytes.
                if not isinstance(value, str):
                    bad = sum(1 for r in runs if not isinstance(r.get(col), (str, type(None))))
                    raise InputError(f"history run {run.get('id')!r}: runs.{col} holds {value!r} where text "
                                     f"belongs ({bad} row(s))")
            elif isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                bad = sum(1 for r in runs if not _finite(r.get(col)))
                raise InputError(f"history run {run.get('id')!r}: runs.{col} holds {value!r} where a number "
                                 f"belongs ({bad} row(s))")
    return runs


def _finite(value) -> bool:
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool)
                             and math.isfinite(value))


def latest(db: sqlite_utils.Database, label: str) -> Optional[dict]:
    """The run most recently added with ``label``, or None."""
    rows = list_runs(db, label, limit=1)
    return rows[0] if rows else None


def run_steps(db: sqlite_utils.Database, run_id: int) -> pd.DataFrame:
    """A run's rank x step rows (all ``STEP_TABLE_COLUMNS`` but run_id), ordered by rank and step."""
    cols = [c for c in STEP_TABLE_COLUMNS if c != "run_id"]
    rows = db.execute(f"select {', '.join(cols)} from rank_steps where run_id = ? order by rank, step",
                      [run_id]).fetchall()
    frame = pd.DataFrame(rows, columns=cols)
    for col in cols:
        if STEP_TABLE_COLUMNS[col] is str:
            # A BLOB in a text column reaches a table as bytes, as in runs (_numbers_checked).
            blob = frame[col].map(lambda v: v is not None and not isinstance(v, str))
            if blob.any():
                raise InputError(f"history run {run_id}: rank_steps.{col} holds {frame[col][blob].iloc[0]!r} "
                                 f"where text belongs ({int(blob.sum())} row(s))")
            continue
        values = pd.to_numeric(frame[col], errors="coerce")
        # Infinity (1e400 reads as inf) is no time, count or rank either; an integer column holds integers.
        bad = (values.isna() & frame[col].notna()) | values.isin([np.inf, -np.inf])
        if STEP_TABLE_COLUMNS[col] is int:
            bad |= values.notna() & ~bad & (values.where(~bad, 0) % 1 != 0)
        # NULL is a value the schema allows (an undefined ratio, an unnumbered step); text is not, and
        # reading it as NaN would turn into a wrong gate verdict.
        if bad.any():
            raise InputError(f"history run {run_id}: rank_steps.{col} holds {frame[col][bad].iloc[0]!r} "
                             f"where a number belongs ({int(bad.sum())} row(s))")
        frame[col] = values
    frame["complete"] = frame["complete"].fillna(0).astype(bool)
    return frame


def baseline_from(path: str | Path, label: str) -> tuple[Optional[Baseline], Optional[str]]:
    """The latest run with ``label`` as a gate baseline, or (None, why) when there is none yet — a first
    CI run whose history cache is empty."""
    if not Path(path).exists():
        return None, f"history database {path} does not exist yet; relative rules skipped"
    with open_db(path, create=False) as db:
        run = latest(db, label)
        if run is None:
            return None, f"no run labelled {label!r} in {path} yet; relative rules skipped"
        steps = run_steps(db, run["id"])[list(STEP_COLUMNS)]
    commit = f" @ {run['commit']}" if run.get("commit") else ""
    return Baseline(steps, f"{path}: run {run['id']} ({label}{commit}, {run['created_at']})"), None
