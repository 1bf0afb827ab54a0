"""Nsight Systems SQLite exports (and ``.nsys-rep`` reports through ``nsys export``) -> RankTraces.

Every process that ran GPU work is one rank. Tables and columns are feature-detected (exports from 2021
to 2026 differ, see the shared reference ``nsys-sqlite.md``); joins that need both sides run inside
SQLite, and string ids are resolved once per distinct id, never per row. Times are stored as integer
ns on the capture clock; ``TARGET_INFO_SESSION_START_TIME.utcEpochNs`` (when present) anchors them to the
Unix epoch like Kineto's times.

The export is opened read-only (``mode=ro`` URI), so a report never modifies a user's file.
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import urllib.parse
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from ..envlist import allowed_env
from ..meta import RunMeta, rank_in_file_name
from ..columns import categorical, frame_of, labels
from ..model import RankTrace
from ..tools.nsys import cached_export
from . import assemble
from .gcpause import no_cyclic_gc

KERNEL = "CUPTI_ACTIVITY_KIND_KERNEL"
MEMCPY = "CUPTI_ACTIVITY_KIND_MEMCPY"
MEMSET = "CUPTI_ACTIVITY_KIND_MEMSET"
SYNC = "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"
RUNTIME = "CUPTI_ACTIVITY_KIND_RUNTIME"
NVTX = "NVTX_EVENTS"

# Fallback copies of the CUDA enums (2.9.1 and older exports ship no ENUM_* tables); nsys-sqlite.md §7.
COPY_KIND = {0: "Unknown", 1: "HtoD", 2: "DtoH", 3: "HtoA", 4: "AtoH", 5: "AtoA", 6: "AtoD", 7: "DtoA",
             8: "DtoD", 9: "HtoH", 10: "PtoP", 11: "HtoD", 12: "DtoH", 13: "DtoD"}
MEM_KIND = {0: "Pageable", 1: "Pinned", 2: "Device", 3: "Array", 4: "Managed", 5: "Device Static",
            6: "Managed Static", 7: "Unknown"}
# Sync rows are named after the API call that produced them (syncType numbering changed across
# releases, gotcha 2), using Kineto's cuda_sync names so analyzers see one vocabulary.
SYNC_NAMES = {
    "cudaStreamSynchronize": "Stream Sync", "cuStreamSynchronize": "Stream Sync",
    "cudaDeviceSynchronize": "Context Sync", "cuCtxSynchronize": "Context Sync",
    "cudaEventSynchronize": "Event Sync", "cuEventSynchronize": "Event Sync",
    "cudaStreamWaitEvent": "Stream Wait Event", "cuStreamWaitEvent": "Stream Wait Event",
    "cudaEventQuery": "Event Query", "cuEventQuery": "Event Query",
    "cudaStreamQuery": "Stream Query", "cuStreamQuery": "Stream Query",
}
_SEP = "\x1f"                            # between the texts of one aggregated column
NO_ID = 0xFFFFFFFF                      # streamId/eventId "not applicable"
_API_SUFFIX = re.compile(r"_v\d+$")
# torch's NVTX ranges (emit_nvtx / --pytorch=autograd-nvtx) append ", seq = N, op_id = N, sizes = [...]";
# dropping it gives Kineto's name for the same op ("aten::mm, seq = 3, op_id = 77" -> "aten::mm").
_TORCH_SUFFIX_RE2 = r"(?s), (?:seq|op_id|sizes|input_op_ids) = .*$"
_TORCH_OP_ID = ", op_id = "
# Reader threads for the large queries; more than three tables rarely matter.
_READERS = max(1, min(3, os.cpu_count() or 1))
RANK_ENV = ("RANK", "LOCAL_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


class _Db:
    """A read-only connection with feature detection, and reader threads for the large queries."""

    def __init__(self, path: Path):
        self.path = path
        self._uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro"
        try:
            self.con = self._connect()
            self.tables = {n for (n,) in self.con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as exc:
            raise InputError(f"not a readable SQLite database ({exc})", path=str(path)) from None
        self._cols: dict[str, set[str]] = {}
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()
        self._readers: list[sqlite3.Connection] = []

    def _connect(self) -> sqlite3.Connection:
        # Reader threads' connections are closed by the thread that closes the _Db, after the pool is done.
        con = sqlite3.connect(self._uri, uri=True, check_same_thread=False)
        # Pages read in place instead of copied in by a read() each (~6 % of a report). SQLite's caveat, a
        # file truncated by another process while mapped, does not arise for an export being reported on.
        con.execute("PRAGMA mmap_size = 1073741824")
        return con

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
        for con in self._readers + [self.con]:
            con.close()

    def has(self, table: str) -> bool:
        return table in self.tables

    def columns(self, table: str) -> set[str]:
        if table not in self._cols:
            self._cols[table] = {r[1] for r in self.con.execute(f'PRAGMA table_info("{table}")')} \
                if table in self.tables else set()
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
        except sqlite3.DatabaseError as exc:
            raise InputError(f"cannot read the export ({exc})", path=str(self.path)) from None

    def select(self, sql: str, kinds: str, con: sqlite3.Connection | None = None) -> list:
        """A query's columns, one letter of ``kinds`` per column: ``i`` an int64 array, ``t`` a list of str,
        ``a`` an Arrow string array (split inside Arrow: no Python string per row).

        Handing rows one at a time from SQLite to Python costs more than the scan itself (~0.3 µs a
        value), so each column is aggregated inside SQLite into one text (``group_concat``) and split in C.
        What that cannot carry goes row by row instead: a value that is not an integer, a text holding the
        separator, an aggregate past SQLite's length limit, text that is not UTF-8.
        """
        con = con or self.con
        names = [f"c{i}" for i in range(len(kinds))]
        aggs = ", ".join(f"group_concat({c})" if k == "i" else f"group_concat({c}, char(31))"
                         for c, k in zip(names, kinds))
        try:
            row = con.execute(f"WITH q({', '.join(names)}) AS ({sql}) SELECT count(*), {aggs} FROM q").fetchone()
        except sqlite3.DatabaseError:
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
        con = getattr(self._local, "con", None)
        if con is None:
            con = self._local.con = self._connect()
            self._readers.append(con)
        return self.select(sql, kinds, con)

    def _row_columns(self, sql: str, kinds: str, con: sqlite3.Connection) -> list:
        rows = self.rows(sql, con=con)
        cols = list(zip(*rows)) if rows else [()] * len(kinds)
        try:
            return [np.array(c, dtype=np.int64) if k == "i" else _texts(["" if v is None else str(v) for v in c], k)
                    for c, k in zip(cols, kinds)]
        except (TypeError, ValueError, OverflowError):
            raise InputError("the export holds a non-integer value where an integer belongs", path=str(self.path)) \
                from None

    def ints(self, sql: str, ncols: int) -> np.ndarray:
        """An all-integer query as an (n, ncols) int64 array."""
        cols = self.select(sql, "i" * ncols)
        return np.stack(cols, axis=1) if cols else np.empty((0, 0), np.int64)

    def pairs(self, table: str) -> list[tuple[str, str]]:
        if not self.has(table) or not {"name", "value"} <= self.columns(table):
            return []
        return [(str(n), "" if v is None else str(v)) for n, v in self.rows(f'SELECT name, value FROM "{table}"')]


# --------------------------------------------------------------------------------------------- .nsys-rep

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
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)   # a partial parse: caught by the count
                    values = np.fromstring(text, dtype=np.int64, sep=",")
            except ValueError:
                return None
        elif kind == "a":
            values = pc.list_flatten(pc.split_pattern(pa.array([text], pa.large_string()), _SEP))
        else:
            values = text.split(_SEP)
        if len(values) != n:
            return None
        out.append(values)
    return out


def _texts(values: list[str], kind: str):
    return pa.array(values, pa.large_string()) if kind == "a" else values


# --------------------------------------------------------------------------------------------- parsing

def parse(path: Path, comm_rules=(), step_pattern: str | None = None) -> list[RankTrace]:
    """One RankTrace per process of the export that ran GPU work."""
    with no_cyclic_gc():
        return _parse(path, comm_rules, step_pattern)


def _parse(path: Path, comm_rules, step_pattern: str | None) -> list[RankTrace]:
    source = path
    if path.suffix.lower() in (".nsys-rep", ".qdrep"):
        path = cached_export(path)
    db = _Db(path)
    try:
        return _parse_db(db, source, comm_rules, step_pattern)
    finally:
        db.close()


def _parse_db(db: _Db, source: Path, comm_rules, step_pattern: str | None) -> list[RankTrace]:
    if not db.has(KERNEL):
        raise InputError(f"no {KERNEL} table: not an Nsight Systems export with CUDA kernels "
                         "(profile with `nsys profile -t cuda,nvtx`)", path=str(source))
    # Every table is read once for all processes, on reader threads, and split by process here: a query per
    # process would scan every table once per process (no index on globalPid), 1.9x the SQL for 8 ranks.
    queries = _start_queries(db)
    notes = _export_notes(db)
    strings = _strings(db)
    threads = _thread_rows(db, strings)
    base = _base_ns(db)
    device = _device_rows(queries, strings)
    by_pid = "globalPid" in db.columns(KERNEL)
    if by_pid:
        procs = np.unique(device["proc"]).tolist()      # the processes with rows in any device table
    host = _host_rows(queries, strings)
    host_procs = np.unique(host["proc"]).tolist()
    if not by_pid:
        # Exports without globalPid (synthetic or trimmed): the only host process owns the GPU rows.
        procs = host_procs[:1] if len(host_procs) == 1 else [0]
    if not procs or not len(device["start"]):
        raise InputError("the export has no GPU activity (the kernel table is empty)", path=str(source))
    envs = _process_env(db)
    ranks = _ranks(envs, procs, source)
    size, device_names = source.stat().st_size, _device_names(db)
    payload_notes = _nccl_payload_notes(db, queries)
    device_of, host_of = _by_process(device), _by_process(host)
    traces = []
    for proc in procs:
        dev = device if len(procs) == 1 or not by_pid else device_of(proc)
        hst = _host_columns(host if host_procs == [proc] else host_of(proc), base)
        meta = RunMeta(source=str(source), format="nsys", bytes=size)
        meta.base_ns = base
        rank, rule = ranks[proc]
        if rank is not None:
            meta.rank, meta.rank_rule = rank, rule
        meta.world_size = len(procs) if len(procs) > 1 else None
        meta.device_names = device_names
        meta.env = _kept_env(envs, proc, len(procs))
        for code, message, count in notes + payload_notes.get(proc, []) + payload_notes.get(None, []):
            meta.warnings.add(code, message, count)
        if not by_pid:
            meta.warnings.add("nsys-no-process-column", "the kernel table has no globalPid column; all GPU rows "
                              "were given to one process", 1)
        dev = _device_columns(dev, base, meta)
        own = threads["proc"] == proc
        thr = frame_of({c: threads[c][own] for c in ("pid", "tid", "name")})
        steps = assemble.steps_from_host(hst, step_pattern)
        traces.append(assemble.build(meta, dev, hst, steps, thr, assemble.comm_meta_frame(), comm_rules))
    return traces


def _by_process(columns: dict):
    """``proc -> that process's rows``: the columns reordered by process once (stable), then sliced per
    process, instead of a boolean mask over every column for every process."""
    cache: dict = {}

    def rows(proc: int) -> dict:
        if not cache:
            order = np.argsort(columns["proc"], kind="stable")
            cache.update({c: v[order] for c, v in columns.items()})
        procs = cache["proc"]
        a, b = np.searchsorted(procs, proc, side="left"), np.searchsorted(procs, proc, side="right")
        return {c: v[a:b] for c, v in cache.items()}

    return rows


def _export_notes(db: _Db) -> list[tuple[str, str, int]]:
    notes = []
    for table, code, why in ((RUNTIME, "nsys-no-runtime", "device work cannot be linked to its launch"),
                             (NVTX, "nsys-no-nvtx", "no step ranges or op names (profile with -t cuda,nvtx)"),
                             (MEMCPY, "nsys-no-memcpy", "no copies captured"),
                             (SYNC, "nsys-no-sync", "no GPU-side sync records")):
        if not db.has(table):
            notes.append((code, f"the export has no {table} table: {why}", 1))
    if db.has(RUNTIME) and "eventClass" not in db.columns(RUNTIME):
        notes.append(("nsys-no-event-class", "RUNTIME has no eventClass column: backtrace duplicates cannot be "
                      "told apart", 1))
    diag = 0
    if db.has("DIAGNOSTIC_EVENT") and "severity" in db.columns("DIAGNOSTIC_EVENT"):
        diag = db.rows("SELECT count(*) FROM DIAGNOSTIC_EVENT WHERE severity >= 2")[0][0]
    if diag:
        notes.append(("nsys-diagnostics", "the capture recorded warnings or errors (DIAGNOSTIC_EVENT)", int(diag)))
    return notes


_PAYLOAD_ENTRIES = "NVTX_PAYLOAD_SCHEMA_ENTRIES"


def _has_payload_schemas(db: _Db) -> bool:
    return db.has(_PAYLOAD_ENTRIES) and {"domainId", "name"} <= db.columns(_PAYLOAD_ENTRIES) \
        and "domainId" in db.columns(NVTX)


def _nccl_payload_notes(db: _Db, q: dict) -> dict[int | None, list[tuple[str, str, int]]]:
    """Per process (None: all of them), why its NCCL ranges give no collective sizes.

    NCCL records each call's message size in an NVTX payload (schema entry "Message size [bytes]"). An
    export keeps payloads only with ``--include-blobs true``, and tracelens does not decode their binary
    layout (no export with blobs has been available to check a decoder against), so bytes stay unknown.
    The NCCL ranges are those of the domains with such a schema, counted on the NVTX rows already read.
    """
    if "nvtx" not in q or not _has_payload_schemas(db):
        return {}
    sized = [d for (d,) in db.rows(f"SELECT DISTINCT domainId FROM {_PAYLOAD_ENTRIES} "
                                   "WHERE name LIKE 'Message size%'") if isinstance(d, int)]
    _, _, gtid, domain, blob, _ = q["nvtx"].result()
    nccl = np.isin(domain, sized)
    procs, total = np.unique(gtid[nccl] >> 24, return_counts=True)
    with_blob = np.bincount(np.searchsorted(procs, gtid[nccl & (blob != 0)] >> 24), minlength=procs.size)
    out: dict[int | None, list[tuple[str, str, int]]] = {}
    for proc, n, blobs in zip(procs.tolist(), total.tolist(), with_blob.tolist()):
        key = proc or None                 # no thread recorded: the note goes to every process
        if not blobs:
            out[key] = [("nsys-nccl-payload-unavailable", "NCCL ranges carry their message size in NVTX payloads, "
                         "but the export was made without them (nsys export --include-blobs true); collective "
                         "sizes are unknown", int(n))]
        else:
            out[key] = [("nsys-nccl-payload-undecoded", "NCCL ranges carry NVTX binary payloads, which tracelens "
                         "does not decode yet; collective sizes are unknown", int(blobs))]
    return out


def _strings(db: _Db) -> dict[int, str]:
    if not db.has("StringIds"):
        return {}
    return {int(i): ("" if v is None else str(v)) for i, v in db.rows("SELECT id, value FROM StringIds")}


def _named(ids: np.ndarray, strings: dict[int, str], clean=None) -> pd.Categorical:
    """String-id codes -> categorical names, each distinct id looked up (and cleaned) once."""
    uniq, inv = np.unique(ids, return_inverse=True)
    names = [strings.get(int(i), f"<string {int(i)}>") for i in uniq]
    if clean is not None:
        names = [clean(n) for n in names]
    cats, remap = np.unique(np.array(names or [""], dtype=object), return_inverse=True)
    codes = remap[inv] if ids.size else np.empty(0, dtype=np.int64)
    return labels(codes, cats)


def api_name(name: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel``."""
    return _API_SUFFIX.sub("", name)


def _start_queries(db: _Db) -> dict:
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
        # Where NCCL payload schemas exist, each range's domain and payload presence ride along for the
        # payload notes (a second scan of the largest table otherwise).
        extra, kinds = "", "iiia"
        if _has_payload_schemas(db):
            blob = '(n."binaryData" IS NOT NULL)' if "binaryData" in db.columns(n) else "0"
            extra, kinds = f'coalesce(n."domainId", -1), {blob}, ', "iiiiia"
        q["nvtx"] = db.later(f'SELECT n."start", n."end", {tid}, {extra}coalesce({text}, {by_id}, \'\') '
                             f'FROM {n} n {join} WHERE n."eventType" IN (59, 60) AND n."end" IS NOT NULL '
                             f'AND n."end" >= n."start"', kinds)
    if db.has(RUNTIME):
        r = RUNTIME
        cls = "eventClass IN (0, 1)" if "eventClass" in db.columns(r) else "1"
        q["runtime"] = db.later(f"SELECT {db.col(r, 'start')}, {db.col(r, 'end')}, {db.col(r, 'globalTid', '0')}, "
                                f"{db.col(r, 'correlationId')}, {db.col(r, 'nameId')}, "
                                f"{db.col(r, 'eventClass', '0')} FROM {r} WHERE {cls}",
                                "i" * 6)
    lane = lambda t: ", ".join([db.col(t, "start"), db.col(t, "end"), db.col(t, "deviceId", "0"),  # noqa: E731
                                db.col(t, "contextId", "0"), db.col(t, "streamId"), db.col(t, "correlationId"),
                                f'{db.col(t, "globalPid", "0")}'])
    q["kernel"] = db.later(f"SELECT {lane(KERNEL)}, {db.col(KERNEL, 'demangledName', db_short(db))} "
                           f"FROM {KERNEL}", "i" * 8)
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


def _block(query: Future) -> np.ndarray:
    """A started all-integer query's columns as one (rows, columns) array."""
    return np.stack(query.result(), axis=1)


def _device_rows(q: dict, strings: dict[int, str]) -> dict:
    """Kernels, copies, sets and syncs (columns), with the process key in ``proc``."""
    parts = []
    cols = ["start", "end", "device", "context", "stream", "correlation", "gpid"]

    k = _block(q["kernel"])
    frame = _columns(k[:, :7], cols)
    frame["kind"], frame["name"] = _const("compute", len(k)), _named(k[:, 7], strings)
    frame["bytes"], frame["cross_device"] = np.full(len(k), -1, np.int64), np.zeros(len(k), bool)
    parts.append(frame)

    if "memcpy" in q:
        m = _block(q["memcpy"])
        frame = _columns(m[:, :7], cols)
        frame["kind"] = _const("memcpy", len(m))
        frame["name"] = categorical([f"Memcpy {COPY_KIND.get(c, 'Unknown')} ({MEM_KIND.get(s, 'Unknown')} -> "
                         f"{MEM_KIND.get(d, 'Unknown')})" for c, s, d in m[:, 8:11].tolist()])
        frame["bytes"] = m[:, 7]
        frame["cross_device"] = (m[:, 8] == 10) | ((m[:, 11] >= 0) & (m[:, 12] >= 0) & (m[:, 11] != m[:, 12]))
        parts.append(frame)
    if "memset" in q:
        s = _block(q["memset"])
        frame = _columns(s[:, :7], cols)
        frame["kind"] = _const("memset", len(s))
        frame["name"] = categorical([f"Memset ({MEM_KIND.get(k_, 'Unknown')})" for k_ in s[:, 8].tolist()])
        frame["bytes"], frame["cross_device"] = s[:, 7], np.zeros(len(s), bool)
        parts.append(frame)
    if "sync" in q:
        runtime = _block(q["runtime"]) if "runtime" in q else None
        parts.append(_sync_rows(_block(q["sync"]), runtime, q["sync_match"], strings, cols))
    out = _stack(parts)
    out["proc"] = out.pop("gpid") >> 24
    return out


def _columns(block: np.ndarray, names: list[str]) -> dict[str, np.ndarray]:
    return {c: block[:, i] for i, c in enumerate(names)}


def _const(value: str, n: int) -> pd.Categorical:
    return labels(np.zeros(n, dtype=np.int8), [value])


def _stack(parts: list[dict]) -> dict:
    """Concatenate column dicts; categoricals are merged through their codes (no per-row strings)."""
    out = {}
    for c in parts[0]:
        vals = [p[c] for p in parts]
        if isinstance(vals[0], pd.Categorical):
            out[c] = _union(vals) if len(vals) > 1 else vals[0]
        else:
            out[c] = np.concatenate([np.asarray(v) for v in vals])
    return out


def _union(cats: list[pd.Categorical]) -> pd.Categorical:
    """The categoricals one after the other, over the union of their categories (first seen first).

    What ``union_categoricals`` does, at a fraction of its cost for a few small category lists.
    """
    index: dict = {}
    codes = []
    for cat in cats:
        remap = np.array([index.setdefault(name, len(index)) for name in cat.categories.tolist()] + [-1],
                         dtype=np.int64)
        codes.append(remap[cat.codes])               # code -1 (missing) reads the appended -1
    return labels(np.concatenate(codes), list(index))


def db_short(db: _Db) -> str:
    """Fallback for exports without ``demangledName``: the short name id, else -1."""
    return '"shortName"' if "shortName" in db.columns(KERNEL) else "-1"


def _sync_sql(db: _Db) -> str:
    y = SYNC
    sel = ", ".join(f'coalesce(y."{c}", {d})' if c in db.columns(y) else d for c, d in (
        ("start", "-1"), ("end", "-1"), ("deviceId", "0"), ("contextId", "0"), ("streamId", "-1"),
        ("correlationId", "-1"), ("globalPid", "0")))
    return f"SELECT {sel} FROM {y} y"


def _sync_match(db: _Db) -> str | None:
    """How a sync record finds the runtime call behind it: by correlation id within its process ("process"),
    by correlation id alone where either table lacks the process column ("any"), or not at all."""
    rt = db.columns(RUNTIME)
    if not db.has(RUNTIME) or not {"correlationId", "nameId"} <= rt or "correlationId" not in db.columns(SYNC):
        return None
    return "process" if "globalTid" in rt and "globalPid" in db.columns(SYNC) else "any"


def _sync_rows(rows: np.ndarray, runtime: np.ndarray | None, match: str | None, strings: dict[int, str],
               cols: list[str]) -> dict:
    """Sync records named after the runtime call behind each (same correlation id, and process if known).

    The match is made here on the runtime rows already read rather than by a join in SQLite, which builds
    a temporary index over the whole runtime table for every process's query."""
    frame = _columns(rows[:, :7], cols)
    frame["stream"] = np.where(frame["stream"] == NO_ID, -1, frame["stream"])
    frame["kind"] = _const("sync", len(rows))
    api = np.full(len(rows), -1, dtype=np.int64)
    if match is not None and runtime is not None and len(runtime) and len(rows):
        # Runtime columns: start, end, globalTid, correlationId, nameId, eventClass.
        r_proc, y_proc = (runtime[:, 2] >> 24, rows[:, 6] >> 24) if match == "process" else \
            (np.zeros(len(runtime), np.int64), np.zeros(len(rows), np.int64))
        procs, inv = np.unique(np.concatenate([r_proc, y_proc]), return_inverse=True)
        inv = inv.reshape(-1)
        r_key = (inv[:len(runtime)] << 32) | (runtime[:, 3] & 0xFFFFFFFF)
        y_key = (inv[len(runtime):] << 32) | (rows[:, 5] & 0xFFFFFFFF)
        order = np.argsort(r_key, kind="stable")
        at = np.searchsorted(r_key[order], y_key, side="right") - 1     # the last of equal keys, as the join did
        found = (at >= 0) & (rows[:, 5] >= 0)
        found[found] = r_key[order][at[found]] == y_key[found]
        api[found] = runtime[order[at[found]], 4]
    frame["name"] = categorical([SYNC_NAMES.get(api_name(strings.get(i, "")), "Unknown Sync") if i >= 0 else "Unknown Sync"
                     for i in api.tolist()])
    frame["bytes"], frame["cross_device"] = np.full(len(rows), -1, np.int64), np.zeros(len(rows), bool)
    return frame


def _device_columns(rows: dict, base: int, meta: RunMeta) -> dict:
    """One process's device rows (columns) in the parser contract; contexts folded into the stream key when needed."""
    stream, device, context = rows["stream"], rows["device"], rows["context"]
    kind = rows["kind"]
    work = kind.codes != (list(kind.categories).index("sync") if "sync" in kind.categories else -2)
    # Distinct (device, context) pairs as one int64 key each (np.unique(axis=0) costs ~1 ms even on a few rows).
    pairs = np.unique((device[work] << 32) | (context[work] & 0xFFFFFFFF))
    devices, per_device = np.unique(pairs >> 32, return_counts=True)
    if (per_device > 1).any():
        # Stream ids are unique per context only: keep lanes apart by putting the context in the high bits.
        stream = np.where(stream >= 0, (context << 32) | stream, stream)
        meta.warnings.add("nsys-multiple-contexts", "a device had several CUDA contexts; stream ids carry the "
                          "context in their upper 32 bits", int((per_device > 1).sum()))
    meta.warnings.add("negative-duration", "events with a negative duration were clamped to 0",
                      int((rows["end"] < rows["start"]).sum()))
    start = rows["start"] + base
    return {"device": device, "stream": stream, "kind": kind, "name": rows["name"], "start_ns": start,
            "end_ns": np.maximum(rows["end"] + base, start), "correlation": rows["correlation"],
            "bytes": rows["bytes"], "cross_device": rows["cross_device"].astype(bool)}


def _host_rows(q: dict, strings: dict[int, str]) -> dict:
    """Runtime/driver API calls and NVTX ranges (columns), with the process key in ``proc``."""
    parts = []
    if "runtime" in q:
        a = _block(q["runtime"])
        names = _named(a[:, 4], strings, api_name)
        driver = (a[:, 5] == 1) | np.isin(names.codes, [i for i, n in enumerate(names.categories)
                                                        if re.match(r"cu[A-Z]", n)])
        parts.append({
            "gtid": a[:, 2], "cat": labels(driver.astype(np.int8), ["cuda_runtime", "cuda_driver"]),
            "name": names, "start_ns": a[:, 0], "end_ns": np.maximum(a[:, 1], a[:, 0]), "correlation": a[:, 3]})
    if "nvtx" in q:
        cols = q["nvtx"].result()
        start, end, gtid, name = cols[0], cols[1], cols[2], cols[-1]
        if len(name):
            # Torch's ranges make nearly every text distinct (", op_id = N"). Cutting at the op id first is a
            # plain substring split; the few distinct heads left then take the full suffix regex (RE2). The
            # result is the regex's on every text: it cuts at the first suffix keyword, and what precedes
            # ", op_id = " holds any earlier one. All inside Arrow, no per-row Python.
            split = pc.split_pattern(name if isinstance(name, pa.Array) else pa.array(name, pa.large_string()),
                                     _TORCH_OP_ID, max_splits=1)
            heads = pc.dictionary_encode(pc.list_element(split, 0))
            cleaned = pc.replace_substring_regex(heads.dictionary, _TORCH_SUFFIX_RE2, "")
            names = pc.dictionary_encode(cleaned)
            head_codes = heads.indices.to_numpy()
            per_text = names.indices.to_numpy()[head_codes]
            stripped = pc.not_equal(pc.binary_length(heads.dictionary), pc.binary_length(cleaned)) \
                .to_numpy(zero_copy_only=False)
            torch_op = stripped[head_codes] | (pc.list_value_length(split).to_numpy(zero_copy_only=False) > 1)
            names = names.dictionary.to_pylist()
            parts.append({
                "gtid": gtid,
                "cat": labels(torch_op.astype(np.int8), ["user_annotation", "cpu_op"]),
                "name": labels(per_text, names),
                "start_ns": start, "end_ns": end, "correlation": np.full(len(name), -1, np.int64)})
    none = np.empty(0, np.int64)
    cols = _stack(parts) if parts else {"gtid": none, "cat": labels(none, []), "name": labels(none, []),
                                        "start_ns": none, "end_ns": none, "correlation": none}
    gtid = cols.pop("gtid")
    return {"proc": gtid >> 24, "pid": (gtid >> 24) & 0xFFFFFF, "tid": gtid & 0xFFFFFF, **cols}


def _host_columns(rows: dict, base: int) -> dict:
    """One process's host rows (columns) in the parser contract, on the epoch clock."""
    n = len(rows["start_ns"])
    return {"pid": rows["pid"], "tid": rows["tid"], "cat": rows["cat"], "name": rows["name"],
            "start_ns": rows["start_ns"] + base, "end_ns": rows["end_ns"] + base,
            "correlation": rows["correlation"], "external_id": np.full(n, -1, np.int64)}


def _thread_rows(db: _Db, strings: dict[int, str]) -> dict[str, np.ndarray]:
    """Thread names as columns (proc, pid, tid, name), the last name recorded for a thread winning."""
    if not db.has("ThreadNames") or not {"globalTid", "nameId"} <= db.columns("ThreadNames"):
        none = np.empty(0, np.int64)
        return {"proc": none, "pid": none, "tid": none, "name": np.empty(0, object)}
    rows = db.ints('SELECT coalesce("globalTid", 0), coalesce("nameId", -1) FROM ThreadNames', 2)
    gtid = rows[:, 0]
    key = ((gtid >> 24) & 0xFFFFFF) << 32 | (gtid & 0xFFFFFF)
    _, last = np.unique(key[::-1], return_index=True)        # the last row of each (pid, tid)
    keep = np.sort(len(key) - 1 - last)
    gtid = gtid[keep]
    return {"proc": gtid >> 24, "pid": (gtid >> 24) & 0xFFFFFF, "tid": gtid & 0xFFFFFF,
            "name": np.array([strings.get(i, "") for i in rows[keep, 1].tolist()] + [None], dtype=object)[:-1]}


def _base_ns(db: _Db) -> int:
    t = "TARGET_INFO_SESSION_START_TIME"
    if db.has(t) and "utcEpochNs" in db.columns(t):
        row = db.rows(f'SELECT "utcEpochNs" FROM {t} LIMIT 1')
        if row and isinstance(row[0][0], int):
            return int(row[0][0])
    return 0


def _device_names(db: _Db) -> list[str]:
    t = "TARGET_INFO_GPU"
    if db.has(t) and "name" in db.columns(t):
        return [str(n) for (n,) in db.rows(f'SELECT DISTINCT "name" FROM {t} WHERE "name" IS NOT NULL')]
    return []


def _process_env(db: _Db) -> list[tuple[int, dict[str, str]]]:
    """(pid, environment) of each launched process recorded in META_DATA_CAPTURE (pid 0 = unknown)."""
    procs: dict[str, dict] = {}
    for name, value in db.pairs("META_DATA_CAPTURE"):
        m = re.match(r"^(PROCESS_\d+):(PID|ENVIRONMENT_VARIABLE)$", name)
        if not m:
            continue
        entry = procs.setdefault(m.group(1), {"pid": 0, "env": {}})
        if m.group(2) == "PID":
            entry["pid"] = int(value) if value.isdigit() else 0
        elif "=" in value:
            k, v = value.split("=", 1)
            entry["env"][k] = v.strip('"')
    out = [(e["pid"], e["env"]) for e in procs.values()]
    for name, value in db.pairs("TARGET_INFO_SYSTEM_ENV"):
        if name == "DeviceEnvironment":
            env = dict(kv.split("=", 1) for kv in value.split(";") if "=" in kv)
            out.append((0, env))
    return out


def _kept_env(envs: list[tuple[int, dict[str, str]]], proc: int, n_procs: int) -> dict[str, str]:
    """The allow-listed settings (envlist.env_allowed) recorded for one process; a lone process also takes the
    environment recorded without a pid."""
    pid = proc & 0xFFFFFF
    out: dict[str, str] = {}
    for p, env in envs:
        if (pid and p == pid) or (not p and n_procs == 1):
            out.update(allowed_env(env))
    return out


def _rank_from_env(env: dict[str, str]) -> int | None:
    for key in RANK_ENV:
        v = env.get(key, "")
        if v.isdigit():
            return int(v)
    return None


def _ranks(envs: list[tuple[int, dict[str, str]]], procs: list[int],
           source: Path) -> dict[int, tuple[int | None, str]]:
    """Rank per process: recorded environment, then the file name, else None (numbered by order later)."""
    out: dict[int, tuple[int | None, str]] = {}
    for proc in procs:
        pid = proc & 0xFFFFFF
        by_pid = [e for p, e in envs if p == pid and pid]
        anon = [e for p, e in envs if not p]
        rank = None
        if by_pid:
            rank = _rank_from_env(by_pid[0])
        elif len(procs) == 1:
            found = [r for r in (_rank_from_env(e) for e in anon) if r is not None]
            rank = found[0] if found else None
        if rank is not None:
            out[proc] = (rank, "environment")
            continue
        from_name = rank_in_file_name(source.name)
        out[proc] = (from_name, "file name") if from_name is not None and len(procs) == 1 else (None, "order")
    return out
