"""NCCL Inspector output (the profiler plugin's JSON lines, formats v4.0 to v4.2) into columns.

The plugin writes ``<dump dir>/<hostname>-pid<pid>.log``, one JSON object per line per completed collective
(``coll_perf``) or point-to-point operation (``p2p_perf``) of each communicator, with ``header`` (the
communicator: id, the process's rank in it, its size, nodes; ``comm_name`` from v4.2) and ``metadata``
(format version, host, pid). Files may be gzipped, concatenated (many processes in one file) or cut short
while written. Every record becomes a row of :data:`~tracelens.model.nccl_records.INSPECTOR_COLUMNS`; what
reading met is counted on the :class:`InspectorLog`: a line that is not JSON or a record of the wrong shape
costs only itself, as a bad Kineto event does, and fields newer than v4.2 are ignored and counted. Nothing
here matches or measures: analyzers/run/log_ranks.py turns the rows into collective tables.
"""

from __future__ import annotations

import io
import math
import os
import re
import zlib
from array import array
from pathlib import Path

from ...model.meta import MAX_WORLD
from ...model.nccl_records import INSPECTOR_COLUMNS, InspectorLog

VERSIONS = ("v4.0", "v4.1", "v4.2")
INSPECTOR_FOLDER = "nccl-inspector-"       # the plugin's default dump folder: nccl-inspector-<job id>
SNIFF_BYTES = 1 << 16
CHUNK = 1 << 20
# The longest line read: the plugin's records are about a kilobyte (a verbose one with many channels a few tens);
# a longer line is garbage or another program's output, and holding it whole (then decoding it) would cost its
# size in memory several times over. It is skipped as it streams past and counted (``too_long``).
MAX_LINE = 16 << 20

_TOP = {"header", "metadata", "coll_perf", "p2p_perf"}
_HEADER = {"id", "rank", "n_ranks", "nnodes", "comm_name"}
_METADATA = {"inspector_output_format_version", "git_rev", "rec_mechanism", "dump_timestamp_us", "hostname", "pid"}
_TRACE = {"event_trace_sn", "event_trace_ts"}
_PERF = {kind: {f"{kind}_{k}" for k in ("sn", "msg_size_bytes", "exec_time_us", "timing_source", "algobw_gbs",
                                          "busbw_gbs")} | {kind} | _TRACE
         for kind in ("coll", "p2p")}
_PERF["coll"] |= {"coll_algo", "coll_proto"}
_PERF["p2p"] |= {"p2p_peer"}
# NCCL's function names (ncclFuncToString) as the collective tables name ops (analyzers' bandwidth factors).
OPS = {"AllReduce": "all_reduce", "ReduceScatter": "reduce_scatter", "AllGather": "all_gather",
       "Broadcast": "broadcast", "Reduce": "reduce", "AllToAll": "all_to_all", "Gather": "gather",
       "Scatter": "scatter", "SendRecv": "send_recv", "Send": "send", "Recv": "recv"}
_HEAD_KEY = b'"inspector_output_format_version"'
_MAX_NAMES = 8                          # unknown field names kept for the note
_INT64 = (1 << 63) - 1
_US = 1000                              # the plugin writes µs; the columns hold ns


class _Implausible(ValueError):
    """A communicator of more than MAX_WORLD ranks: the record is dropped and counted on its own."""


def _decode(line: bytes):
    """The line's JSON, or None where it is not JSON (nested past the decoder's depth too)."""
    import msgspec      # lazy: finding the inputs sniffs every log, and a report forks before msgspec loads

    try:
        return msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None


def sniff_inspector(path: Path) -> bool:
    """Whether a file is Inspector output: its first line (inflated, if gzipped) is a JSON object whose
    ``metadata`` names an Inspector format version. A Kineto trace, an NCCL debug log, a saved report or any
    other JSON lines are not."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
            if head[:2] == b"\x1f\x8b":
                try:
                    head = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS).decompress(head, SNIFF_BYTES)
                except zlib.error:
                    return False
    except OSError:
        return False
    line = head.lstrip().split(b"\n", 1)[0]
    if _HEAD_KEY not in line:
        return False
    obj = _decode(line)
    if obj is None:
        # A first line longer than the head: the key is there, so it is Inspector's if the line opens as one.
        return line.startswith(b'{"header"') and len(line) >= SNIFF_BYTES - 1
    meta = obj.get("metadata") if isinstance(obj, dict) else None
    return isinstance(meta, dict) and isinstance(meta.get("inspector_output_format_version"), str)


# The plugin's other output (NCCL_INSPECTOR_PROM_DUMP=1): <dump dir>/nccl_inspector_metrics_<GPU uuid>.prom, a
# Prometheus text file rewritten with the latest value per (communicator, collective): no record of each
# collective, so nothing to match across ranks.
PROMETHEUS_SNAPSHOT = ("an NCCL Inspector Prometheus snapshot (NCCL_INSPECTOR_PROM_DUMP=1): the latest value per "
                       "collective, not a record of each to match across ranks; NCCL_INSPECTOR_PROM_DUMP=0 writes "
                       "the JSON records")
_PROM_LINE = re.compile(rb"^(?:# (?:HELP|TYPE) )?nccl_[a-z_]+(?:\{| )", re.MULTILINE)


def sniff_prometheus(path: Path) -> bool:
    """Whether a file is the Inspector's Prometheus snapshot: a ``.prom`` file whose head has ``nccl_*``
    metric lines."""
    if not path.name.lower().endswith(".prom"):
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return False
    return _PROM_LINE.search(head) is not None


def parse_inspector(path: Path | str, chunk: int = CHUNK, max_line: int = MAX_LINE) -> InspectorLog:
    """The records of one file; a file that cannot be read gives a log without records (the caller notes
    it). A line longer than ``max_line`` bytes is skipped and counted, never held whole."""
    path = Path(path)
    try:
        with open(path, "rb") as fh:
            return _read(fh, str(path), chunk, max_line, os.fstat(fh.fileno()).st_size)
    except OSError:
        return InspectorLog(path=str(path), bytes=0)


def parse_bytes(data: bytes, name: str, chunk: int = CHUNK, max_line: int = MAX_LINE) -> InspectorLog:
    return _read(io.BytesIO(data), name, chunk, max_line, len(data))


class _Growing:
    """The columns as they grow (typed arrays: no Python object per record is kept) and the code tables."""

    def __init__(self) -> None:
        self.cols = {c: array("d") if c.endswith("_gbps") else array("q") for c in INSPECTOR_COLUMNS}
        self.codes: dict[str, dict] = {"process": {}, "comm": {}, "op": {}, "timing": {}}
        self.comm_names: list = []

    def code(self, table: str, value) -> int:
        codes = self.codes[table]
        got = codes.get(value)
        if got is None:
            got = codes[value] = len(codes)
            if table == "comm":
                self.comm_names.append(None)
        return got


def _read(fh, name: str, chunk: int, max_line: int, size: int) -> InspectorLog:
    log = InspectorLog(path=name, bytes=0)
    first = fh.read(2)
    raw_read = fh.read
    if first == b"\x1f\x8b":
        from ..kineto import Members, max_inflate      # lazy: the one gzip reader and its bound on a bomb

        sizes = [len(first)]
        # What a gzip trace may inflate to (100x the file, at least 1 GiB, or TRACELENS_MAX_INFLATE): the logs
        # are read up to it and no further, and the cut said (a bomb of a few KB of records would otherwise
        # fill memory with their rows).
        cap = max_inflate(size)
        room = [cap]

        def counted(n: int) -> bytes:
            b = raw_read(n)
            sizes[0] += len(b)
            return b

        members = Members(counted, chunk, first=first)

        def read(n: int) -> bytes:
            if room[0] <= 0:
                return b""
            try:
                b = members.inflate(min(n, room[0]))
            except (EOFError, zlib.error):
                log.truncated = True
                return b""
            room[0] -= len(b)
            if room[0] <= 0:
                try:
                    more = members.inflate(1)
                except (EOFError, zlib.error):
                    more = b"x"           # past the cap either way: what follows is not read
                if more:
                    log.inflate_cap = cap
            return b
    else:
        sizes = [0]
        pending = [first]

        def read(n: int) -> bytes:
            if pending:
                b = pending.pop() + raw_read(n)
            else:
                b = raw_read(n)
            sizes[0] += len(b)
            return b
    rows = _Growing()
    unknown: set[str] = set()
    # The line being read, in pieces (never joined until its end is seen), and how long it is so far; a line
    # past ``max_line`` is dropped as soon as it is known to be, and the rest of it skipped up to its end.
    parts: list[bytes] = []
    held = 0
    skipping = False
    while True:
        block = read(chunk)
        if not block:
            break
        lines = block.split(b"\n")
        last = lines.pop()
        if lines:
            # The first line ends the one read so far (the rest of one being skipped, or one now too long).
            if skipping:
                skipping = False
                lines[0] = b""
            elif held + len(lines[0]) > max_line:
                log.too_long += 1
                lines[0] = b""
            elif parts:
                parts.append(lines[0])
                lines[0] = b"".join(parts)
            parts, held = [], 0
            for line in lines:
                if len(line) > max_line:
                    log.too_long += 1
                elif line.strip():
                    _record(line, rows, log, unknown)
        if skipping:
            continue
        if held + len(last) > max_line:
            log.too_long += 1
            parts, held, skipping = [], 0, True
        elif last:
            parts.append(last)
            held += len(last)
    rest = b"".join(parts)
    if rest.strip() and not log.inflate_cap:      # the line the cap cut is not a line cut short while written
        # A last line without its end: whole if it decodes, else cut short while written.
        if _decode(rest) is None:
            log.truncated = True
        else:
            _record(rest, rows, log, unknown)
    log.bytes = sizes[0]
    import numpy as np      # lazy: finding the inputs sniffs with this module and needs no numpy

    log.columns = {c: np.frombuffer(a, dtype=np.float64 if a.typecode == "d" else np.int64).copy()
                   for c, a in rows.cols.items()}
    _drop_far_times(log)
    log.records = len(log.columns["sn"])
    log.processes = list(rows.codes["process"])
    log.comms = list(rows.codes["comm"])
    log.comm_names = rows.comm_names
    log.ops = list(rows.codes["op"])
    log.timing = list(rows.codes["timing"])
    log.unknown_names = sorted(unknown)[:_MAX_NAMES]
    return log


def _drop_far_times(log: InspectorLog) -> None:
    """The rows whose kernel start or end lies more than a day (columns.FAR_NS) from the median kernel start of
    the log's rows left out, counted (``far_times``): a clock jump or garbage would stretch every timeline."""
    import numpy as np      # lazy: as in _read
    from ...model.columns import far_times, median_start     # lazy: numpy, as in _read

    cols = log.columns
    timed = np.flatnonzero(cols["start_ns"] >= 0)
    if not timed.size:
        return
    far = far_times(cols["start_ns"][timed], cols["end_ns"][timed], median_start(cols["start_ns"][timed]))
    if far.any():
        keep = np.ones(len(cols["start_ns"]), dtype=bool)
        keep[timed[far]] = False
        log.far_times = int(far.sum())
        log.columns = {c: v[keep] for c, v in cols.items()}


def _int(v, most: int = _INT64) -> int:
    """A count, size, id or time: an int (bool is an int subclass, and no count), 0 to ``most``."""
    if type(v) is not int:
        raise TypeError
    if not 0 <= v <= most:      # negative counts are nonsense; past int64 no column holds them
        raise ValueError
    return v


def _num(v) -> float:
    """A bandwidth: a finite number, 0 or more (1e400 decodes as infinity)."""
    if type(v) not in (int, float):
        raise TypeError
    v = float(v)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError
    return v


def _str(v) -> str:
    if type(v) is not str:
        raise TypeError
    return v


def _record(line: bytes, rows: _Growing, log: InspectorLog, unknown: set) -> None:
    obj = _decode(line)
    if obj is None:
        log.not_json += 1
        return
    try:
        values = _values(obj, log, unknown)
    except _Implausible:
        log.implausible_world += 1
        return
    except (TypeError, KeyError, AttributeError, ValueError):
        log.bad_shape += 1
        return
    version, host, pid, comm, comm_name, vals = values
    log.versions[version] = log.versions.get(version, 0) + 1
    if version not in VERSIONS:
        log.unknown_version += 1
    vals["process"] = rows.code("process", (host, pid))
    vals["comm"] = c = rows.code("comm", comm)
    if comm_name is not None and rows.comm_names[c] is None:
        rows.comm_names[c] = comm_name
    vals["op"] = rows.code("op", vals["op"])
    vals["timing"] = rows.code("timing", vals["timing"]) if vals["timing"] is not None else -1
    if vals["start_ns"] < 0:
        log.no_timestamps += 1
    for c, v in vals.items():
        rows.cols[c].append(v)


def _values(obj, log: InspectorLog, unknown: set):
    """The record's row, or TypeError/KeyError for a record of the wrong shape (nothing of it is kept)."""
    head, meta = obj["header"], obj["metadata"]
    kind = "coll" if "coll_perf" in obj else "p2p"
    perf = obj[f"{kind}_perf"]
    if not isinstance(head, dict) or not isinstance(meta, dict) or not isinstance(perf, dict):
        raise TypeError
    extra = (obj.keys() - _TOP) | (head.keys() - _HEADER) | (meta.keys() - _METADATA) | (perf.keys() - _PERF[kind])
    if extra:
        log.unknown_fields += 1
        unknown.update(extra)
    version = _str(meta["inspector_output_format_version"])
    comm_name = head.get("comm_name")
    op = _str(perf[kind])
    n_ranks = _int(head["n_ranks"])
    if n_ranks > MAX_WORLD:
        raise _Implausible
    rank = _int(head["rank"])
    nnodes = _int(head.get("nnodes", 0))
    if n_ranks < 1 or rank >= n_ranks or nnodes > n_ranks:
        raise ValueError
    # Sizes as the collective tables scale them (times the ranks, for all-gather and reduce-scatter) still int64.
    msg_bytes = _int(perf[f"{kind}_msg_size_bytes"], _INT64 // n_ranks)
    exec_us = _int(perf[f"{kind}_exec_time_us"], _INT64 // _US)
    start = end = -1
    ts = perf.get("event_trace_ts")
    if ts is not None:
        kernels = ts["kernel_events"]
        if not isinstance(kernels, list):
            raise TypeError
        if kernels:
            # The kernel runs on every channel: it starts with the first channel and ends with the last.
            start = min(_int(k["kernel_start_ts"], _INT64 // _US) for k in kernels) * _US
            end = max(_int(k["kernel_stop_ts"], _INT64 // _US) for k in kernels) * _US
            # A kernel ends after it starts; one of 2 µs or more (each end floored to a µs) took time to run.
            if end < start or (exec_us == 0 and end - start >= 2 * _US):
                raise ValueError
    peer = -1
    if kind == "p2p":
        peer = _int(perf["p2p_peer"])
        if peer >= n_ranks:
            raise ValueError
    timing = perf.get(f"{kind}_timing_source")
    algbw, busbw = perf.get(f"{kind}_algobw_gbs"), perf.get(f"{kind}_busbw_gbs")
    vals = {"comm_rank": rank, "n_ranks": n_ranks, "nnodes": nnodes,
            "kind": 0 if kind == "coll" else 1, "op": OPS.get(op, op), "sn": _int(perf[f"{kind}_sn"]),
            "msg_bytes": msg_bytes, "exec_ns": exec_us * _US,
            "start_ns": start, "end_ns": end, "timing": None if timing is None else _str(timing),
            "peer": peer,
            "algbw_gbps": -1.0 if algbw is None else _num(algbw),
            "busbw_gbps": -1.0 if busbw is None else _num(busbw)}
    return (version, _str(meta["hostname"]), _int(meta["pid"]), _str(head["id"]),
            None if comm_name is None else _str(comm_name), vals)
