"""Nsight Systems exports, stage 1 of 4: reading the SQLite tables.

Everything that talks to SQLite: the read-only connection with feature detection (:class:`ExportDb`; exports
from 2021 to 2026 differ in tables and columns), each query's columns aggregated inside SQLite and split
in C instead of handed over row by row, the large tables read side by side on reader threads, pages read
through mmap, and the SQL of those large queries (what exists in the export decides what they select).
Kept apart from what the rows mean (:mod:`.rows`) because nearly all of a report's time is spent
here, and the fallbacks that keep odd exports readable (row-by-row reads, non-UTF-8 text) live in one place.

The export is opened read-only and immutable (``mode=ro&immutable=1`` URI), so a report never modifies a
user's file nor creates anything beside it: a WAL-mode export opened merely read-only gets ``-shm`` and
``-wal`` files. An export whose ``-wal`` file still holds transactions is copied (with it) to a temporary
folder and read there, since immutable would ignore them.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import tempfile
import threading
import urllib.parse
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..._speed import ints_from_text, map_sqlite_pages
from ...errors import EMPTY_FILE, InputError

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"

_SEP = "\x1f"                            # between the texts of one aggregated column
# Selected for a NULL start or end: no capture-clock time is this far before the capture, so rows holding
# it are known to have no time (counted and skipped, never read as a time).
NULL_TIME = -(2**62)
_NULL = str(NULL_TIME)
# Reader threads for the large queries; more than three tables rarely matter.
_READERS = max(1, min(3, os.cpu_count() or 1))


class ExportDb:
    """A read-only connection with feature detection, and reader threads for the large queries."""

    def __init__(self, path: Path):
        self.path = path
        self._copy: str | None = None
        self._cols: dict[str, set[str]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []
        self.con = None
        try:
            self._uri = self._open_uri(path)
            self.con = self._connect()
            # Names are read with undecodable bytes replaced: a table or column named in latin-1 is not one
            # of ours, and must not stop the read.
            self.tables = {str(n) for (n,) in self._meta("SELECT name FROM sqlite_master WHERE type='table'")}
        except (sqlite3.DatabaseError, OSError, UnicodeDecodeError) as exc:
            # UnicodeDecodeError: SQLite's own message quoting a damaged, non-UTF-8 schema.
            self.close()
            raise InputError(f"not a readable SQLite database ({exc})", path=str(path)) from None
        if not self.tables and path.stat().st_size == 0:
            # SQLite opens a file of no bytes as a database of no tables: say so rather than name a table.
            self.close()
            raise InputError(EMPTY_FILE, path=str(path))

    def _open_uri(self, path: Path) -> str:
        wal = path.with_name(path.name + "-wal")
        if wal.is_file() and wal.stat().st_size > 0:
            self._copy = tempfile.mkdtemp(prefix="tracelens-export-")
            copy = Path(self._copy) / "export.sqlite"
            shutil.copyfile(path, copy)
            shutil.copyfile(wal, Path(self._copy) / "export.sqlite-wal")
            return "file:" + urllib.parse.quote(str(copy)) + "?mode=ro"
        return "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"

    def _meta(self, sql: str) -> list[tuple]:
        con = self.con
        con.text_factory = lambda b: b.decode("utf-8", "replace")
        try:
            return con.execute(sql).fetchall()
        finally:
            con.text_factory = str

    def _connect(self) -> sqlite3.Connection:
        # Reader threads' connections are closed by the thread that closes the ExportDb, after the pool is done.
        con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        map_sqlite_pages(con)
        return con

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for con in self._readers + [self.con]:
            if con is not None:
                con.close()
        if self._copy is not None:
            shutil.rmtree(self._copy, ignore_errors=True)
            self._copy = None

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            try:
                self._cols[table] = {str(r[1]) for r in self._meta(f'PRAGMA table_info("{table}")')} \
                    if table in self.tables else set()
            except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
                raise InputError(f"cannot read the export ({exc})", path=str(self.path)) from None
        return self._cols[table]

    def col(self, table: str, name: str, default: str = "-1", alias: str = "") -> str:
        """A select expression for a column that may be missing or NULL."""
        expr = f'coalesce("{name}", {default})' if name in self.columns(table) else default
        return f'{expr} AS "{alias or name}"'

    def rows(self, sql: str, params=(), con: sqlite3.Connection | None = None) -> list[tuple]:
        con = con or self.con
        try:
            try:
                return con.execute(sql, params).fetchall()
            except sqlite3.OperationalError as exc:
                if "decode" not in str(exc):
                    raise
                # Windows exports can hold latin-1 user names (gotcha 7): replace, never crash. Only this
                # query pays for decoding in Python.
                con.text_factory = lambda b: b.decode("utf-8", "replace")
                try:
                    return con.execute(sql, params).fetchall()
                finally:
                    con.text_factory = str
        except (sqlite3.DatabaseError, UnicodeDecodeError) as exc:
            raise InputError(f"cannot read the export ({exc})", path=str(self.path)) from None

    def select(self, sql: str, kinds: str, con: sqlite3.Connection | None = None) -> list:
        """A query's columns, one letter of ``kinds`` per column: ``i`` an int64 array, ``t`` a list of str,
        ``a`` an Arrow string array (split inside Arrow: no Python string per row).

        Handing rows one at a time from SQLite to Python costs more than the scan itself, so each column
        is aggregated inside SQLite into one text (``group_concat``) and split in C.
        What that cannot carry goes row by row instead: a value that is not an integer, a text holding the
        separator, an aggregate past SQLite's length limit, text that is not UTF-8.
        """
        con = con or self.con
        names = [f"c{i}" for i in range(len(kinds))]
        aggs = ", ".join(f"group_concat({c})" if k == "i" else f"group_concat({c}, char(31))"
                         for c, k in zip(names, kinds))
        try:
            row = con.execute(f"WITH q({', '.join(names)}) AS ({sql}) SELECT count(*), {aggs} FROM q").fetchone()
        except (sqlite3.DatabaseError, UnicodeDecodeError):
            row = None
        out = _split_aggregates(row, kinds) if row is not None else None
        return out if out is not None else self._row_columns(sql, kinds, con)

    def later(self, sql: str, kinds: str) -> Future:
        """:meth:`select` on a reader thread. sqlite3 lets go of the GIL while SQLite scans and aggregates,
        so on several cores the large tables are read side by side (one read-only connection per thread)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="tracelens-sqlite")
        return self._pool.submit(self._select_on_reader, sql, kinds)

    def _select_on_reader(self, sql: str, kinds: str) -> list:
        return self.select(sql, kinds, self._reader())

    def _row_columns(self, sql: str, kinds: str, con: sqlite3.Connection) -> list:
        rows = self.rows(sql, con=con)
        cols = list(zip(*rows)) if rows else [()] * len(kinds)
        try:
            return [np.array(c, dtype=np.int64) if k == "i" else _texts(["" if v is None else str(v) for v in c], k)
                    for c, k in zip(cols, kinds)]
        except (TypeError, ValueError, OverflowError):
            raise InputError("the export holds a non-integer value where an integer belongs", path=str(self.path)) \
                from None

    def later_blobs(self, sql: str) -> Future:
        """:meth:`blobs` on a reader thread."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=_READERS, thread_name_prefix="tracelens-sqlite")
        return self._pool.submit(lambda: self.blobs(sql, self._reader()))

    def _reader(self) -> sqlite3.Connection:
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = self._connect()
            self._readers.append(con)
        return con

    def blobs(self, sql: str, con: sqlite3.Connection | None = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """A ``SELECT id, blob`` query as (ids, all blobs as one byte buffer, each blob's length).

        Aggregated inside SQLite into one list of ids, one of lengths and one hex text, like :meth:`select`:
        handing 10^5 blobs to Python one row at a time costs more than decoding them. Row by row when the
        aggregate is past SQLite's length limit.
        """
        con = con or self.con
        try:
            row = con.execute(f"WITH q(i, b) AS ({sql}) SELECT count(*), group_concat(i), group_concat(length(b)), "
                              f"group_concat(hex(b), '') FROM q").fetchone()
        except sqlite3.DatabaseError:
            row = None
        if row is not None and not row[0]:
            return np.empty(0, np.int64), np.empty(0, np.uint8), np.empty(0, np.int64)
        if row is not None and isinstance(row[3], str):
            ids, lengths = ints_from_text(row[1]), ints_from_text(row[2])
            if ids is not None and lengths is not None and ids.size == lengths.size == row[0]:
                return ids, np.frombuffer(bytes.fromhex(row[3]), np.uint8), lengths
        rows = self.rows(sql, con=con)
        data = [bytes(b) if isinstance(b, (bytes, bytearray, memoryview)) else b"" for _, b in rows]
        lengths = np.fromiter((len(b) for b in data), np.int64, len(data))
        return np.fromiter((i for i, _ in rows), np.int64, len(rows)), np.frombuffer(b"".join(data), np.uint8), lengths

    def ints(self, sql: str, ncols: int) -> np.ndarray:
        """An all-integer query as an (n, ncols) int64 array."""
        cols = self.select(sql, "i" * ncols)
        return np.stack(cols, axis=1) if cols else np.empty((0, 0), np.int64)

    def pairs(self, table: str) -> list[tuple[str, str]]:
        if not self.has(table) or not {"name", "value"} <= self.columns(table):
            return []
        return [(str(n), "" if v is None else str(v)) for n, v in self.rows(f'SELECT name, value FROM "{table}"')]


def _split_aggregates(row: tuple, kinds: str) -> list | None:
    """``(count, aggregate, ...)`` -> columns; None when an aggregate does not split into ``count`` values."""
    n, out = row[0], []
    for text, kind in zip(row[1:], kinds):
        if not n:
            out.append(np.empty(0, np.int64) if kind == "i" else _texts([], kind))
            continue
        if not isinstance(text, str):
            return None
        if kind == "i":
            values = ints_from_text(text)       # stops at a value that is not an integer: caught by the count
            if values is None:
                return None
        elif kind == "a":
            values = pc.list_flatten(pc.split_pattern(arrow_strings([text]), _SEP))
        else:
            values = text.split(_SEP)
        if len(values) != n:
            return None
        out.append(values)
    return out


def _texts(values: list[str], kind: str):
    return arrow_strings(values) if kind == "a" else values


def arrow_strings(values: list) -> pa.Array:
    """Python strings (None: null) as an Arrow large_string array, built from its buffers.

    Not ``pa.array``: on any Python or numpy input it asks pyarrow's pandas shim whether that is a pandas
    object, which imports pandas, a large share of a cold nsys report that no report needs (bench/RESULTS.md,
    "pandas on the nsys path").
    """
    data = [v.encode("utf-8", "surrogatepass") if v is not None else b"" for v in values]
    offsets = np.zeros(len(data) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, data), np.int64, len(data)), out=offsets[1:])
    valid = None
    if any(v is None for v in values):
        valid = pa.py_buffer(np.packbits(np.array([v is not None for v in values]), bitorder="little"))
    return pa.Array.from_buffers(pa.large_string(), len(data), [valid, pa.py_buffer(offsets),
                                                                 pa.py_buffer(b"".join(data))])


def numpy_of(arr: pa.Array) -> np.ndarray:
    """An Arrow integer or boolean array without nulls as numpy, read from its buffers (``to_numpy`` also
    imports pandas, see :func:`arrow_strings`); anything else through ``to_numpy``."""
    kind = arr.type
    if arr.null_count == 0 and (pa.types.is_integer(kind) or pa.types.is_boolean(kind)):
        data = arr.buffers()[1]
        if pa.types.is_boolean(kind):
            bits = np.unpackbits(np.frombuffer(data, np.uint8), bitorder="little")
            return bits[arr.offset: arr.offset + len(arr)].astype(bool)
        dtype = np.dtype(str(kind))
        return np.frombuffer(data, dtype, len(arr), arr.offset * dtype.itemsize)
    return arr.to_numpy(zero_copy_only=False)


def first_items(lists: pa.Array) -> pa.Array:
    """The first item of every list (every one has at least one, none is null: a split of texts), taken by
    its offset (``pc.list_element`` needs a scalar index, and ``pa.scalar`` imports pandas too)."""
    if lists.null_count or lists.offset:
        return pc.list_element(lists, 0)
    return lists.values.take(arrow_ints(numpy_of(lists.offsets)[:-1]))


def arrow_ints(values) -> pa.Array:
    """An int64 Arrow array over a numpy array's memory (see :func:`arrow_strings` for why not pa.array)."""
    values = np.ascontiguousarray(values, dtype=np.int64)
    return pa.Array.from_buffers(pa.int64(), len(values), [None, pa.py_buffer(values)])


PAYLOAD_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
PAYLOAD_SCHEMAS = "NVTX_PAYLOAD_SCHEMAS"
_PAYLOAD_COLUMNS = ("binaryData", "jsonText", "jsonTextId")
NVTX_BLOBS = (f'SELECT rowid, CAST("binaryData" AS BLOB) FROM {NVTX} WHERE "domainId" > 0 AND "eventType" IN (59, 60) '
              f'AND "binaryData" IS NOT NULL')


def _payload_capable(db: ExportDb) -> bool:
    """Whether the NVTX query carries each range's domain, payload presence and rowid (for the NCCL payloads,
    :mod:`.nccl_payloads`): here because it shapes that query, while what the payloads mean is not this
    module's business."""
    cols = db.columns(NVTX)
    return "domainId" in cols and (db.has(PAYLOAD_ENTRIES) or any(c in cols for c in _PAYLOAD_COLUMNS))


def start_queries(db: ExportDb) -> dict:
    """The large queries, started on the reader threads. The NVTX ranges go first: usually the longest read,
    they would otherwise decide when the host rows can be assembled; the device rows are assembled while
    they are read."""
    q = {}
    if db.has(NVTX) and {"start", "end", "eventType"} <= db.columns(NVTX):
        n = NVTX
        text = 'n."text"' if "text" in db.columns(n) else "NULL"
        join, by_id = "", "NULL"
        if "textId" in db.columns(n) and db.has("StringIds"):
            join, by_id = 'LEFT JOIN StringIds s ON s.id = n."textId"', "s.value"
        tid = 'coalesce(n."globalTid", 0)' if "globalTid" in db.columns(n) else "0"
        # Where payloads can exist, each range's domain, payload presence and rowid ride along: the NCCL
        # ranges and which of them have a payload are found without a second scan of the largest table.
        extra, kinds = "", "iiia"
        if _payload_capable(db):
            present = " OR ".join(f'n."{c}" IS NOT NULL' for c in _PAYLOAD_COLUMNS if c in db.columns(n)) or "0"
            extra, kinds = f'coalesce(n."domainId", -1), ({present}), n.rowid, ', "iiiiiia"
            q["nvtx_payload"] = True
        q["nvtx"] = db.later(f'SELECT n."start", n."end", {tid}, {extra}coalesce({text}, {by_id}, \'\') '
                             f'FROM {n} n {join} WHERE n."eventType" IN (59, 60) AND n."end" IS NOT NULL '
                             f'AND n."end" >= n."start"', kinds)
        if "nvtx_payload" in q and "binaryData" in db.columns(n) and \
                dict(db.pairs("META_DATA_EXPORT")).get("EXPORT_PARAM_INCLUDE_BLOBS") != "false":
            # Payload blobs of ranges outside the default domain (NCCL's among them), read beside the rest.
            q["nvtx_blobs"] = db.later_blobs(NVTX_BLOBS)
    if db.has(RUNTIME):
        r = RUNTIME
        cls = "eventClass IN (0, 1)" if "eventClass" in db.columns(r) else "1"
        q["runtime"] = db.later(f"SELECT {db.col(r, 'start', _NULL)}, {db.col(r, 'end', _NULL)}, {db.col(r, 'globalTid', '0')}, "
                                f"{db.col(r, 'correlationId')}, {db.col(r, 'nameId')}, "
                                f"{db.col(r, 'eventClass', '0')} FROM {r} WHERE {cls}",
                                "i" * 6)
    lane = lambda t: ", ".join([db.col(t, "start", _NULL), db.col(t, "end", _NULL), db.col(t, "deviceId", "0"),  # noqa: E731
                                db.col(t, "contextId", "0"), db.col(t, "streamId"), db.col(t, "correlationId"),
                                f'{db.col(t, "globalPid", "0")}'])
    launch = ", ".join(db.col(KERNEL, c, "0") for c in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"))
    q["kernel"] = db.later(f"SELECT {lane(KERNEL)}, {db.col(KERNEL, 'demangledName', db_short(db))}, {launch} "
                           f"FROM {KERNEL}", "i" * 14)
    if db.has(MEMCPY):
        q["memcpy"] = db.later(f"SELECT {lane(MEMCPY)}, {db.col(MEMCPY, 'bytes')}, {db.col(MEMCPY, 'copyKind', '0')}, "
                               f"{db.col(MEMCPY, 'srcKind', '7')}, {db.col(MEMCPY, 'dstKind', '7')}, "
                               f"{db.col(MEMCPY, 'srcDeviceId')}, {db.col(MEMCPY, 'dstDeviceId')} FROM {MEMCPY}", "i" * 13)
    if db.has(MEMSET):
        q["memset"] = db.later(f"SELECT {lane(MEMSET)}, {db.col(MEMSET, 'bytes')}, "
                               f"{db.col(MEMSET, 'memKind', '2')} FROM {MEMSET}",
                               "i" * 9)
    if db.has(SYNC):
        q["sync"] = db.later(_sync_sql(db), "i" * 7)
        q["sync_match"] = _sync_match(db)
    return q


def db_short(db: ExportDb) -> str:
    """Fallback for exports without ``demangledName``: the short name id, else -1."""
    return '"shortName"' if "shortName" in db.columns(KERNEL) else "-1"


def _sync_sql(db: ExportDb) -> str:
    y = SYNC
    sel = ", ".join(f'coalesce(y."{c}", {d})' if c in db.columns(y) else d for c, d in (
        ("start", _NULL), ("end", _NULL), ("deviceId", "0"), ("contextId", "0"), ("streamId", "-1"),
        ("correlationId", "-1"), ("globalPid", "0")))
    return f"SELECT {sel} FROM {y} y"


def _sync_match(db: ExportDb) -> str | None:
    """How a sync record finds the runtime call behind it: by correlation id within its process ("process"),
    by correlation id alone where either table lacks the process column ("any"), or not at all."""
    rt = db.columns(RUNTIME)
    if not db.has(RUNTIME) or not {"correlationId", "nameId"} <= rt or "correlationId" not in db.columns(SYNC):
        return None
    return "process" if "globalTid" in rt and "globalPid" in db.columns(SYNC) else "any"
