"""Ranks known from NCCL Inspector logs alone: each process's records as the collective table a trace's rank
hands combine (seam.COMM_COLUMNS), so that matching, clocks, waits, the straggler, bandwidth and outliers are
the cross-rank analysis's own code, fed by the logs (docs/metrics.md, "From NCCL Inspector logs").

A process is one (hostname, pid). Its rank is its rank in the run's widest communicator (the one with the most
ranks; on a tie the one most processes were seen in, then the lowest id): Inspector numbers ranks per
communicator, and the widest one is the world. A row is a collective record with kernel timestamps (verbose
output): its start the kernel's first channel start, its end the last channel stop, both on the host's clock,
which crossrank/clocks.py aligns per host from matched end times. Its key is (communicator id, ``coll_sn``),
the ``pg-seq`` key. What the logs do not hold is not made up: no step, no compute, so no overlap, no exposed
time (-1) and no lead before a collective (the late rank's reason is unknown).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...contract import InputFile, RankResult, Totals, WarningEntry
from ..._speed import give_back_freed_memory
from ...errors import printable
from ...model.nccl_records import InspectorLog
from ..seam import COMM_COLUMNS, LEAD_COLUMNS, RankAnalysis

FORMAT = "nccl-inspector"        # InputFile.format of an Inspector log
# nccl-tests' S for these is the whole buffer of every rank (docs/metrics.md, "Bandwidth"); Inspector writes
# the per-rank count x type size (inspector.cc, inspectorComputeOpBw: traffic = msg size x nranks).
_TIMES_N = ("all_gather", "reduce_scatter")
_READ = ("process", "comm", "comm_rank", "n_ranks", "kind", "op", "sn", "msg_bytes", "start_ns", "end_ns")
# Without kernel timestamps anywhere (NCCL_INSPECTOR_DUMP_VERBOSE=0, the plugin's default): each record's exec
# time instead of the times it does not have (``_exec_times``).
_READ_EXEC = ("process", "comm", "comm_rank", "n_ranks", "kind", "op", "sn", "msg_bytes", "exec_ns", "timing")
# The one timing source whose exec time runs from this rank's own kernel start (its arrival on the GPU) to the
# collective's end (the longest channel's, on the GPU's clock: inspector.cc, calculateMaxKernelExecTimeUsecs;
# the plugin's default keeps only these, NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING=1): the member that arrives last
# runs shortest. A time taken on the CPU also counts the queue before the kernel, longest on a rank whose GPU is
# behind: it would name the wrong rank.
KERNEL_GPU = "kernel_gpu"


@dataclass
class LogRanks:
    analyses: list[RankAnalysis] = field(default_factory=list)
    warnings: list[WarningEntry] = field(default_factory=list)
    inputs: list[InputFile] = field(default_factory=list)   # one per file: its rank when it holds one process
    records: int = 0              # collective records read
    rows: int = 0                 # ... of which with kernel timestamps, in the collective tables
    exec_times: bool = False      # no record had timestamps: the rows' times were made from exec times


def analyses(logs: list[InspectorLog], exec_times: bool = False) -> LogRanks:
    """One RankAnalysis per process of the logs, in rank order; the logs' columns are taken (``_joined``).
    ``exec_times``: where no record has kernel timestamps, times made from exec times (``_exec_times``); only
    for logs alone: beside traces, rows must be on a clock to be paired and moved onto the traces'."""
    out = _analyses(logs, exec_times)
    give_back_freed_memory()        # what joining and sorting the rows freed: _joined
    return out


def _analyses(logs: list[InspectorLog], exec_times: bool) -> LogRanks:
    out = LogRanks()
    if not logs:
        return out
    exec_times = exec_times and any(log.records for log in logs) and \
        all(log.no_timestamps >= log.records for log in logs)
    col, procs, comms, names, ops, files, per_log = _joined(logs, _READ_EXEC if exec_times else _READ)
    coll = col["kind"] == 0
    out.records = int(coll.sum())
    # The world: the widest communicator, on a tie the one most processes were seen in, then the lowest id.
    # Per communicator and per (communicator, process) by sorts, not a mask or a Python loop over the rows: at
    # thousands of ranks a mask per communicator or process costs seconds (bench/RESULTS.md, "NCCL Inspector
    # logs of thousands of ranks").
    n_procs, n_comms = max(len(procs), 1), len(comms)
    pairs = np.unique(col["comm"] * n_procs + col["process"])
    seen = np.bincount(pairs // n_procs, minlength=n_comms)
    widest = np.zeros(n_comms, np.int64)
    np.maximum.at(widest, col["comm"], col["n_ranks"])
    seen_in = dict(enumerate(seen.tolist()))
    width = dict(enumerate(widest.tolist()))
    world = min(range(len(comms)), key=lambda c: (-width[c], -seen_in[c], comms[c]))
    in_world = np.flatnonzero(col["comm"] == world)
    # Each process's rank is the one of its first record in the world.
    rank_of = dict(zip(*(v.tolist() for v in _first_of(col["process"][in_world], col["comm_rank"][in_world]))))
    taken = set(rank_of.values())
    outside = [p for p in range(len(procs)) if p not in rank_of]
    nxt = max(taken, default=-1) + 1
    for p in outside:          # not in the world communicator: numbered after it, and said so
        rank_of[p] = nxt
        nxt += 1
    if outside:
        out.warnings.append(WarningEntry(code="inspector-rank-unknown", rank=None, count=len(outside), message=(
            f"NCCL Inspector: {len(outside)} process(es) not in the widest communicator "
            f"({printable(comms[world], one_line=True)}): "
            f"numbered after its ranks")))
    claimed: dict[int, list[int]] = {}
    for p, r in rank_of.items():
        claimed.setdefault(r, []).append(p)
    dropped = set()
    for r, ps in claimed.items():
        if len(ps) > 1:          # two processes claim one rank (two runs' logs?): the one with more records
            keep = max(ps, key=lambda p: (int((col["process"] == p).sum()), -p))
            dropped.update(p for p in ps if p != keep)
    if dropped:
        out.warnings.append(WarningEntry(code="inspector-duplicate-rank", rank=None, count=len(dropped), message=(
            f"NCCL Inspector: {len(dropped)} process(es) claim a rank another process has: left out (logs of "
            f"two runs?)")))
    if exec_times:
        timed = _exec_times(col, coll & ~np.isin(col["process"], list(dropped)), out)
    else:
        timed = coll & (col["start_ns"] >= 0) & ~np.isin(col["process"], list(dropped))
        out.rows = int(timed.sum())
    # The members of each communicator: the ranks of the processes seen in it.
    members: dict[int, set] = {}
    seen_pairs = _first_of(col["comm"][timed] * n_procs + col["process"][timed])[0]
    for c, p in zip((seen_pairs // n_procs).tolist(), (seen_pairs % n_procs).tolist()):
        members.setdefault(c, set()).add(rank_of[p])
    lone = [c for c, m in members.items() if len(m) == 1 and width[c] > 1]
    if lone:
        out.warnings.append(WarningEntry(code="inspector-lone-communicator", rank=None, count=len(lone), message=(
            f"NCCL Inspector: {len(lone)} communicator(s) of several ranks seen by one rank only "
            f"({', '.join(sorted(printable(comms[c], one_line=True) for c in lone)[:4])}): their collectives are not "
            f"matched")))
    groups = {comms[c]: tuple(sorted(m)) for c, m in members.items()}
    for log, ps in zip(logs, per_log):
        mine = sorted({rank_of[p] for p in ps if p not in dropped})
        out.inputs.append(InputFile(path=printable(log.path, one_line=True), format=FORMAT,
                                    rank=mine[0] if len(mine) == 1 else -1, bytes=log.bytes, rank_rule="inspector"))
    op_names = np.array(ops + [None], dtype=object)
    times_n = np.array([o in _TIMES_N for o in ops] + [False], dtype=bool)
    comm_ids = np.array(comms, dtype=object)
    comm_desc = np.array(names, dtype=object)
    # The timed rows by rank, then start (lexsort is stable: equal starts stay in the order read), as one table
    # of which each rank's collective table is a slice (a view): combine concatenates the ranks' tables in
    # rank order, which is this table again, without a copy (crossrank/match.py, ``_joined``).
    rank_at = np.full(len(procs), -1, np.int64)
    for p, r in rank_of.items():
        rank_at[p] = r
    rows = np.flatnonzero(timed)
    row_rank = rank_at[col["process"][rows]]
    by_rank = np.lexsort((col["start_ns"][rows], row_rank))
    rows, row_rank = rows[by_rank], row_rank[by_rank]
    del by_rank
    for name in ("process", "comm_rank", "kind"):
        del col[name]
    # Each of the table's columns made, then what it was made from dropped: the joined columns and the table
    # are never whole together (at thousands of ranks, a quarter of a report's peak).
    n = col.pop("n_ranks")[rows]
    op = col.pop("op")[rows]
    table = {"op": op_names[op], "bytes": np.where(times_n[op], col["msg_bytes"][rows] * n, col["msg_bytes"][rows]),
             "group_size": n}
    del op, col["msg_bytes"]
    comm = col.pop("comm")[rows]
    table["pg_name"], table["pg_desc"] = comm_ids[comm], comm_desc[comm]
    del comm
    for name, c in (("seq", "sn"), ("start_ns", "start_ns"), ("end_ns", "end_ns")):
        table[name] = col.pop(c)[rows]
    del rows, n
    kept = sorted((r, p) for p, r in rank_of.items() if p not in dropped)
    bounds = np.searchsorted(row_rank, [r for r, _ in kept] + [max((r for r, _ in kept), default=-1) + 1])
    for i, (rank, p) in enumerate(kept):
        host = procs[p][0]
        lo, hi = int(bounds[i]), int(bounds[i + 1])
        k = hi - lo
        # What the logs do not hold is one value for every row: a read-only view of it, no memory per row
        # (ten of the table's columns; combine only reads them).
        minus, zero = np.broadcast_to(np.int64(-1), (k,)), np.broadcast_to(np.int64(0), (k,))
        comm = {**{c: v[lo:hi] for c, v in table.items()}, "step": minus,
                "dtype": np.broadcast_to(np.array(None, object), (k,)), "exposed_ns": minus, "stream": zero,
                "launch_ns": minus, **dict.fromkeys(LEAD_COLUMNS, zero)}
        assert set(comm) == set(COMM_COLUMNS)
        source = printable(files[p], one_line=True)
        result = RankResult(rank=rank, world_size=width[world], device=None, device_name=None, mode="gpu",
                            source=source, steps=[], steps_from=None,
                            totals=Totals(duration_ns=0, compute_ns=0, comm_ns=0, overlap_ns=0, exposed_comm_ns=0,
                                          idle_ns=0, overlap_pct=None, exposed_comm_fraction=None))
        out.analyses.append(RankAnalysis(rank=rank, source=source, inputs=[], result=result, collectives=[],
                                         comm=comm, findings=[], warnings=[], host=host, groups=groups,
                                         from_logs=True, exec_times=exec_times))
    return out


def _exec_times(col: dict, usable: np.ndarray, out: LogRanks) -> np.ndarray:
    """Times for records that have none, from their exec times (docs/metrics.md, "From NCCL Inspector logs"):
    a blocking collective ends together on its members, so each member's record is given the same end, one per
    (communicator, ``coll_sn``), and starts its exec time before it. The waits, the transfer (the shortest exec
    time), the arrival skew and the last rank (the one that ran shortest) are then what the cross-rank analysis
    makes of any matched rows; the ends are apart by more than the longest exec time, so a rank's rows never
    overlap. Only ``kernel_gpu`` timing (:data:`KERNEL_GPU`); the rows used, and a warning saying so."""
    timing = col.pop("timing")
    exec_ns = col.pop("exec_ns")
    ok = usable & (exec_ns > 0) & (timing == 1)
    del timing
    rows = np.flatnonzero(ok)
    out.rows, out.exec_times = len(rows), True
    start = np.full(len(exec_ns), -1, np.int64)
    end = np.full(len(exec_ns), -1, np.int64)
    if len(rows):
        spacing = int(exec_ns[rows].max()) + 1
        comm, sn = col["comm"][rows], col["sn"][rows]
        # One place per (communicator, coll_sn): each communicator's counts after the ones before it, without a
        # sort of every row (at thousands of ranks a sort's temporaries are hundreds of MB); where those places
        # would not fit the ns of an int64 (counts in the billions), the distinct keys in order instead.
        top = np.zeros(int(comm.max()) + 1, np.int64)
        np.maximum.at(top, comm, sn)
        base = np.concatenate([[0], np.cumsum(top + 1)[:-1]])
        if float(base[-1] + top[-1] + 2) * spacing < 2.0 ** 62:
            at = base[comm] + sn
        else:
            at = np.unique(np.stack([comm, sn], axis=1), axis=0, return_inverse=True)[1].reshape(-1)
        del comm, sn
        end[rows] = (at + 1) * spacing
        del at
        start[rows] = end[rows] - exec_ns[rows]
    col["start_ns"], col["end_ns"] = start, end
    other = int((usable & (exec_ns > 0) & ~ok).sum())
    out.warnings.append(WarningEntry(code="inspector-exec-times", rank=None, count=len(rows), message=(
        "NCCL Inspector logs without kernel timestamps (NCCL_INSPECTOR_DUMP_VERBOSE=0): waits, transfers and the "
        "last rank from each member's exec time (kernel_gpu timing: the last to arrive runs shortest), on a "
        "blocking collective's ending together on its members; when each member arrived, and clocks, unknown"
        + (f"; {other:,} records timed on the CPU or naming no timing source left out" if other else ""))))
    return ok


def _first_of(keys: np.ndarray, *values: np.ndarray) -> tuple[np.ndarray, ...]:
    """The distinct ``keys`` in order of first appearance, and each one's ``values`` at that first row."""
    _, first = np.unique(keys, return_index=True)
    first.sort()
    return (keys[first], *(v[first] for v in values))


def _joined(logs: list[InspectorLog], read: tuple = _READ):
    """Every log's columns concatenated, with processes and communicators coded over all of them; the file
    each process was first read from. The logs' columns are taken (emptied): at thousands of ranks a second
    copy of every row would be a third of a report's peak (bench/RESULTS.md, "NCCL Inspector logs of
    thousands of ranks")."""
    procs: dict = {}
    comms: dict = {}
    names: list = []
    ops: dict = {}
    files: dict = {}
    per_log = []
    for log in logs:
        if log.records and not log.columns:
            raise ValueError(f"{log.path}: its NCCL Inspector rows were taken by an earlier report")
    total = sum(len(log.columns.get("sn", ())) for log in logs)
    maps = []
    for log in logs:
        pmap = np.array([procs.setdefault(p, len(procs)) for p in log.processes] or [0], np.int64)
        cmap = []
        for c, name in zip(log.comms, log.comm_names):
            if c not in comms:
                comms[c] = len(comms)
                names.append(name)
            elif name is not None and names[comms[c]] is None:
                names[comms[c]] = name
            cmap.append(comms[c])
        omap = np.array([ops.setdefault(o, len(ops)) for o in log.ops] or [0], np.int64)
        # Timing: 1 for kernel_gpu, else 0 (a record without one is coded -1: the last entry, 0).
        tmap = np.array([int(t == KERNEL_GPU) for t in log.timing] + [0], np.int64)
        maps.append({"process": pmap, "comm": np.array(cmap or [0], np.int64), "op": omap, "timing": tmap})
        for p in log.processes:
            files.setdefault(procs[p], log.path)
        per_log.append([procs[p] for p in log.processes])
    # Only the columns read here (a copy of the others, the plugin's own times and bandwidths, would be a third
    # of this step's peak at thousands of ranks), one at a time: each log's is dropped once copied, and its
    # pages given back, so the logs and the joined columns are never whole together.
    col = {}
    for name in read:
        col[name] = out = np.empty(total, np.int64)
        at = 0
        for log, m in zip(logs, maps):
            v = log.columns.pop(name, np.empty(0, np.int64))
            out[at:at + len(v)] = m[name][v] if name in m else v
            at += len(v)
        give_back_freed_memory()
    for log in logs:
        log.columns = {}
    return col, list(procs), list(comms), names, list(ops), files, per_log
