"""Nsight Systems mutations: a plan (JSON-serialisable operations) drawn from a seeded generator, then
applied to a copy of a base export. As for Kineto (:mod:`.kineto_mut`), regression cases keep plans.

SQL operations: NULLs and values of the wrong type in the columns tracelens reads (the table is first rebuilt
without column types or constraints, so SQLite stores anything), tables and columns dropped, tables
emptied, rows duplicated, latin-1 text, table and column names, extreme times and epoch offsets, a WAL
journal. Byte operations on the file afterwards: truncated and torn pages.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
from pathlib import Path

TABLES = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
          "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
          "TARGET_INFO_SESSION_START_TIME", "ThreadNames", "META_DATA_CAPTURE", "TARGET_INFO_GPU"]
COLUMNS = {
    "CUPTI_ACTIVITY_KIND_KERNEL": ["start", "end", "deviceId", "contextId", "streamId", "correlationId", "globalPid",
                                   "demangledName", "shortName"],
    "CUPTI_ACTIVITY_KIND_RUNTIME": ["start", "end", "globalTid", "correlationId", "nameId", "eventClass"],
    "NVTX_EVENTS": ["start", "end", "eventType", "text", "textId", "globalTid", "domainId"],
    "StringIds": ["id", "value"],
    "CUPTI_ACTIVITY_KIND_MEMCPY": ["start", "end", "bytes", "copyKind", "srcKind", "dstKind", "deviceId", "streamId"],
    "CUPTI_ACTIVITY_KIND_MEMSET": ["start", "end", "bytes", "memKind", "streamId"],
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ["start", "end", "correlationId", "streamId", "globalPid"],
    "TARGET_INFO_SESSION_START_TIME": ["utcEpochNs"],
    "ThreadNames": ["globalTid", "nameId"],
    "META_DATA_CAPTURE": ["name", "value"],
    "TARGET_INFO_GPU": ["name"],
}
# SQL literals of every storage class and extreme integers.
VALUES = ["NULL", "'abc'", "''", "'12'", "1.5", "x'00ff'", "0", "-1", "9223372036854775807", "-9223372036854775808",
          "4611686018427387904", "-4611686018427387904", "CAST(x'ff41' AS TEXT)", "'ProfilerStep#1'", "1e300"]


def plan(rng: random.Random) -> list:
    ops = []
    for _ in range(rng.choice([1, 1, 2, 2, 3])):
        kind = rng.choices(["set", "drop_table", "drop_column", "empty", "dup_rows", "latin_name", "epoch",
                            "wal", "truncate", "tear", "step_text"], weights=[30, 4, 6, 3, 3, 3, 4, 2, 3, 3, 3])[0]
        table = rng.choice(TABLES)
        if kind == "set":
            ops.append([kind, table, rng.choice(COLUMNS[table]), rng.choice(VALUES), rng.choice([1, 2, 3, 7, 100]),
                        rng.randrange(100)])
        elif kind in ("drop_table", "empty", "dup_rows"):
            ops.append([kind, table])
        elif kind == "drop_column":
            ops.append([kind, table, rng.choice(COLUMNS[table])])
        elif kind == "latin_name":
            ops.append([kind, table, rng.choice([None] + COLUMNS[table])])
        elif kind == "epoch":
            ops.append([kind, rng.choice(["9223372036854775000", "-1", "'abc'", "NULL", "4611686018427387904"])])
        elif kind == "wal":
            ops.append([kind])
        elif kind == "step_text":
            ops.append([kind, rng.choice(["ProfilerStep#1", "ProfilerStep#x", "ProfilerStep#99999999999999999999"])])
        else:
            ops.append([kind, rng.random(), rng.randrange(2**31)])
    return ops


def _tables(con) -> set[str]:
    return {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}


def _columns(con, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _loosen(con, table: str) -> None:
    """Rebuild ``table`` without types or constraints (so any value can go in any column)."""
    con.execute(f'CREATE TABLE "tmp_loose" AS SELECT * FROM "{table}"')
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'ALTER TABLE "tmp_loose" RENAME TO "{table}"')


def apply(ops: list, base: Path, out: Path) -> Path:
    """Copy ``base`` to ``out`` and mutate it."""
    shutil.copyfile(base, out)
    out.chmod(0o644)
    con = sqlite3.connect(out)
    con.text_factory = lambda b: b.decode("utf-8", "replace")
    byte_ops = []
    try:
        for op in ops:
            if op[0] in ("truncate", "tear"):
                byte_ops.append(op)
                continue
            try:
                _sql_op(con, op)
                con.commit()
            except sqlite3.Error:
                con.rollback()            # an operation this export cannot take (no such table): skipped
    finally:
        con.close()
    data = None
    for op in byte_ops:
        data = bytearray(out.read_bytes()) if data is None else data
        rng = random.Random(op[2])
        if op[0] == "truncate":
            page = 4096 if rng.random() < 0.5 else 1
            data = data[:max(1, int(len(data) * op[1])) // page * page]
        else:
            for _ in range(rng.randrange(1, 6)):
                at = rng.randrange(len(data))
                data[at:at + 64] = bytes(rng.randrange(256) for _ in range(64))
    if data is not None:
        out.write_bytes(bytes(data))
    return out


def _sql_op(con, op: list) -> None:
    kind = op[0]
    tables = _tables(con)
    if kind == "wal":
        con.execute("PRAGMA journal_mode = WAL")
        return
    if kind == "epoch":
        t = "TARGET_INFO_SESSION_START_TIME"
        if t in tables:
            _loosen(con, t)
            con.execute(f'UPDATE {t} SET "utcEpochNs" = {op[1]}')
        return
    if kind == "step_text":
        if "StringIds" in tables:
            con.execute("UPDATE StringIds SET value = ? WHERE value LIKE 'ProfilerStep#%' AND id % 2 = 0", (op[1],))
        if "NVTX_EVENTS" in tables and "text" in _columns(con, "NVTX_EVENTS"):
            con.execute("UPDATE NVTX_EVENTS SET text = ? WHERE text LIKE 'ProfilerStep#%' AND rowid % 2 = 0", (op[1],))
        return
    table = op[1]
    if table not in tables:
        return
    if kind == "set":
        column, value, every, offset = op[2], op[3], op[4], op[5]
        if column not in _columns(con, table):
            return
        _loosen(con, table)
        con.execute(f'UPDATE "{table}" SET "{column}" = {value} WHERE rowid % {every} = {offset % every}')
    elif kind == "drop_table":
        con.execute(f'DROP TABLE "{table}"')
    elif kind == "drop_column":
        cols = _columns(con, table)
        if op[2] in cols and len(cols) > 1:
            keep = ", ".join(f'"{c}"' for c in cols if c != op[2])
            con.execute(f'CREATE TABLE "tmp_loose" AS SELECT {keep} FROM "{table}"')
            con.execute(f'DROP TABLE "{table}"')
            con.execute(f'ALTER TABLE "tmp_loose" RENAME TO "{table}"')
    elif kind == "empty":
        con.execute(f'DELETE FROM "{table}"')
    elif kind == "dup_rows":
        _loosen(con, table)
        con.execute(f'INSERT INTO "{table}" SELECT * FROM "{table}"')
    elif kind == "latin_name":
        # The stored schema's name bytes changed to latin-1 ("é" as one byte): not UTF-8.
        con.execute("PRAGMA writable_schema = ON")
        old = (op[2] or table).encode()
        new = old[:-1] + b"\xe9"
        con.execute("UPDATE sqlite_master SET sql = CAST(replace(CAST(sql AS BLOB), ?, ?) AS TEXT) WHERE name = ?",
                    (old, new, table))
        if op[2] is None:
            con.execute("UPDATE sqlite_master SET name = CAST(? AS TEXT), tbl_name = CAST(? AS TEXT) "
                        "WHERE name = ?", (new, new, table))
        con.execute("PRAGMA writable_schema = OFF")
