"""Per-step compute/communication overlap for one rank (definitions: docs/metrics.md).

GPU mode (the rank has device activity): on the rank's main device, K = ∪ compute kernels, C = ∪ comm
activities, M = ∪ memcpy/memset (also kept apart as copies); sync events are never busy time. CPU mode (no
device activity, e.g. gloo): K = ∪ main-thread cpu_op intervals outside collective calls (the ``c10d::*`` ops
that issue them, ``record_param_comms``, ``nccl:*`` / ``gloo:*`` scopes, what runs inside them, and the own
time of the ops that wrap them), C = ∪ gloo collectives on worker threads. Every metric is a length of a set
clipped to the step window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...model.columns import isin, matches
from ...model.linking import LAUNCH_CATS, launched_before_capture, main_thread, step_of
from ...model import RankTrace
from ...model.table import Table
from .. import intervals as iv

LAUNCH_NAMES = r"Launch|Memcpy|Memset"   # runtime/driver calls that put work on a stream


@dataclass
class Sets:
    """The interval sets of one rank (already restricted to the analysed device or thread)."""

    compute: iv.IntervalSet
    comm: iv.IntervalSet
    busy: iv.IntervalSet
    mode: str
    device: int | None
    memcpy: iv.IntervalSet = iv.empty()     # memory copies that are not communication
    memset: iv.IntervalSet = iv.empty()
    copy: iv.IntervalSet = iv.empty()       # memcpy ∪ memset
    # device_ops rows of the busy activities on the analysed device, and per row whether it was launched
    # before the capture began (GPU mode only)
    work: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=np.int64))
    early: np.ndarray = field(default_factory=lambda: np.empty(0, dtype=bool))


@dataclass
class Windows:
    step: np.ndarray          # step number per window (-1: whole trace, no ProfilerStep)
    start: np.ndarray
    end: np.ndarray
    complete: np.ndarray      # False where device work of the step was cut off by the profiler window


def primary_device(trace: RankTrace) -> int | None:
    """The device with the most compute+comm time (a rank normally drives one GPU)."""
    ops = trace.device_ops
    work = isin(ops["kind"], ("compute", "comm", "memcpy", "memset"))
    if not work.any():
        return None
    ids, inv = np.unique(ops["device"][work], return_inverse=True)
    busy = np.zeros(ids.size, dtype=np.int64)
    np.add.at(busy, inv.reshape(-1), (ops["end_ns"] - ops["start_ns"])[work])
    return int(ids[np.argmax(busy)])          # the lowest device id among equals


_NCCL_HOST = r"nccl:|nccl[A-Z]"        # torch's nccl:* scopes, NCCL's own API ranges (ncclAllReduce, …)


def nccl_host_calls(trace: RankTrace) -> int:
    """Host events that are NCCL calls (a run that used NCCL, whether or not its GPU work was recorded)."""
    host = trace.host_ops
    return int(matches(host["name"], _NCCL_HOST).sum()) if len(host) else 0


def interval_sets(trace: RankTrace, warn) -> Sets:
    device = primary_device(trace)
    if device is not None:
        ops = trace.device_ops
        on = ops["device"] == device
        kind = ops["kind"]
        busy = ~isin(kind, ("sync",))
        warn("other-devices-ignored", f"activity on devices other than {device} is not part of this rank's "
             "metrics", int((~on & busy).sum()))
        s, e = ops["start_ns"], ops["end_ns"]
        compute, comm, busy = on & isin(kind, ("compute",)), on & isin(kind, ("comm",)), on & busy
        memcpy, memset = on & isin(kind, ("memcpy",)), on & isin(kind, ("memset",))
        copy = memcpy | memset
        work = np.flatnonzero(busy)
        return Sets(iv.union(s[compute], e[compute]), iv.union(s[comm], e[comm]), iv.union(s[busy], e[busy]),
                    "gpu", device, iv.union(s[memcpy], e[memcpy]), iv.union(s[memset], e[memset]),
                    iv.union(s[copy], e[copy]), work, _launched_before_capture(trace, work))
    host = trace.host_ops
    main = main_thread(host)
    if main is None:
        return Sets(iv.empty(), iv.empty(), iv.empty(), "cpu", None)
    nccl = nccl_host_calls(trace)
    if nccl or trace.meta.backend == "nccl":
        # NCCL works only on GPUs: its calls without device activity mean the profiler left the GPU out,
        # not a gloo run.
        warn("no-device-activity", f"no GPU activity in the trace although the run used NCCL ({nccl} NCCL "
             "calls on the CPU): the profiler recorded CPU activity only, so communication and its overlap "
             "cannot be measured; profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]", 1)
    else:
        warn("no-device-activity", "no GPU activity in the trace: CPU ops of the main thread are analysed as "
             "compute and gloo collectives as communication", 1)
    on_main = (host["pid"] == main[0]) & (host["tid"] == main[1])
    calls, around = collective_calls(host, on_main)
    cpu = on_main & (host["cat"] == "cpu_op") & ~calls & ~around
    gloo = host["comm_kind"] == "gloo"
    s, e = host["start_ns"], host["end_ns"]
    # The ops around a call (the autograd node that fired DDP's hook) keep their other children as compute;
    # their own time beside the call is the call's, never compute that hides the collective it issued.
    compute = iv.subtract(iv.union(s[cpu], e[cpu]), iv.union(s[calls], e[calls]))
    comm = iv.union(s[gloo], e[gloo])
    return Sets(compute, comm, iv.union(np.concatenate([s[cpu], s[gloo]]), np.concatenate([e[cpu], e[gloo]])),
                "cpu", None)


COLLECTIVE_CALLS = r"c10d::|record_param_comms$|nccl:|gloo:"   # host ops that issue a collective


def collective_calls(host: Table, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Among ``rows`` (a mask of host ops): the collective calls with everything inside them, and the ops
    that enclose a call (its ancestors), as two masks. Neither is compute: a call is the collective's own
    host work, and an op around it lasts as long as the call does."""
    parent = host["parent"]
    calls = rows & matches(host["name"], COLLECTIVE_CALLS)
    inside = calls.copy()
    has_parent = parent >= 0
    while True:                      # descendants, one nesting level per pass (a few levels deep)
        grown = inside | (has_parent & inside[np.maximum(parent, 0)])
        if (grown == inside).all():
            break
        inside = grown
    around = np.zeros(calls.size, dtype=bool)
    up = parent[np.flatnonzero(calls)]
    while up.size:
        up = up[up >= 0]
        up = up[~around[up]]
        around[up] = True
        up = parent[up]
    return inside & rows, around & rows & ~inside


def step_windows(trace: RankTrace, sets: Sets, warn) -> Windows:
    """Windows per the step rule (docs/metrics.md, Steps): from max(span start, end of the device work
    launched before the step, previous window's end) to max(span end, end of the work launched in it)."""
    steps = trace.steps.sort_by("start_ns")
    if steps.empty:       # the whole capture is one window (step_inference.settle said why)
        lo, hi = _extent(sets, trace)
        return Windows(np.array([-1]), np.array([lo]), np.array([hi]), np.array([True]))
    num, s, e = (steps[c] for c in ("step", "start_ns", "end_ns"))
    work_end = _work_end_per_step(trace, sets, num, s, e)
    end = np.maximum(e, work_end)
    # When the CPU runs ahead, a step's span begins while the GPU still runs earlier steps (those launched
    # before the capture too): that work is not the step's, so the window waits for it to finish.
    start = np.maximum(s, _work_end_before(trace, sets, s)) if sets.mode == "gpu" else s.copy()
    end = np.maximum(end, start)
    for k in range(1, start.size):  # windows never overlap; a step begins where the previous one ended
        start[k] = max(start[k], end[k - 1])
        end[k] = max(end[k], start[k])
    complete = np.ones(num.size, dtype=bool)
    cut = _cut_off_launches(trace, s[-1], e[-1], sets)
    if cut:
        complete[-1] = False
        warn("incomplete-step", f"step {num[-1]}: {cut} launches at its end have no device activity in the "
             "trace (the profiler window closed first); its metrics cover only what was recorded", 1)
    return Windows(num, start, end, complete)


def _extent(sets: Sets, trace: RankTrace) -> tuple[int, int]:
    s, e = sets.busy
    if s.size:
        return int(s[0]), int(e[-1])
    # Nothing ever busy (only zero-length activities): the window is where the trace's activity is, never
    # the epoch.
    for ops in (trace.device_ops, trace.host_ops):
        if len(ops):
            return int(ops["start_ns"].min()), int(ops["end_ns"].max())
    return 0, 0


def _work_end_per_step(trace: RankTrace, sets: Sets, num, s, e) -> np.ndarray:
    """Per step of ``num``, the later of its span's end and the end of its work (device activities on the
    main device by their step; gloo collectives in CPU mode by their start)."""
    if sets.mode == "gpu":
        ops = trace.device_ops
        keep = (ops["device"] == sets.device) & (ops["step"] >= 0) & ~isin(ops["kind"], ("sync",))
        step, end = ops["step"][keep], ops["end_ns"][keep]
    else:
        host = trace.host_ops
        gloo = host["comm_kind"] == "gloo"
        start = host["start_ns"][gloo]
        i = np.searchsorted(s, start, side="right") - 1
        inside = (i >= 0) & (start < e[np.maximum(i, 0)])
        step, end = num[i[inside]], host["end_ns"][gloo][inside]
    return np.maximum(e, _max_by(step, end, num))


def _max_by(keys: np.ndarray, values: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """The largest of ``values`` per key, for each key in ``wanted`` (-1 where it has none), in int64."""
    uniq, inverse = np.unique(keys, return_inverse=True)
    if not uniq.size:
        return np.full(wanted.size, -1, dtype=np.int64)
    top = np.full(uniq.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, inverse.reshape(-1), values)
    at = np.minimum(np.searchsorted(uniq, wanted), uniq.size - 1)
    return np.where(uniq[at] == wanted, top[at], -1)


def _launched_before_capture(trace: RankTrace, rows: np.ndarray) -> np.ndarray:
    """Which of these device rows were launched before the capture began (see linking)."""
    ops, host = trace.device_ops, trace.host_ops
    launch_corr = host["correlation"][isin(host["cat"], LAUNCH_CATS)]
    return launched_before_capture(ops["correlation"][rows], ops["launch_idx"][rows],
                                   launch_corr)


def _work_end_before(trace: RankTrace, sets: Sets, t: np.ndarray) -> np.ndarray:
    """For each time in ``t`` (sorted), the end of the device work launched before it (-1 if none).

    Work launched before the capture counts as launched before every step; work whose launch is lost for
    another reason counts at its own start, as for its step."""
    rows, ops = sets.work, trace.device_ops
    launch = ops["launch_idx"][rows]
    at = np.where(launch >= 0, trace.host_ops["start_ns"][np.maximum(launch, 0)] if len(trace.host_ops)
                  else 0, ops["start_ns"][rows])
    at[sets.early] = np.iinfo(np.int64).min
    # Bucket b holds the work launched at or after t[b-1] and before t[b]; a running maximum over the
    # buckets gives each t the end of everything launched before it (no sort of the activities).
    bucket = np.searchsorted(t, at, side="right")
    last = np.full(t.size + 1, -1, dtype=np.int64)
    np.maximum.at(last, bucket, ops["end_ns"][rows])
    return np.maximum.accumulate(last)[:-1]


def pre_capture(trace: RankTrace, sets: Sets) -> dict | None:
    """The device work launched before the capture, once per rank: counts, busy/comm/copy time, extent."""
    rows = sets.work[sets.early]
    if rows.size == 0:
        return None
    ops = trace.device_ops
    kind = ops["kind"]
    kernel, comm = isin(kind, ("compute", "comm"))[rows], isin(kind, ("comm",))[rows]
    copy = isin(kind, ("memcpy", "memset"))[rows]
    s, e = ops["start_ns"][rows], ops["end_ns"][rows]
    return {"kernels": int(kernel.sum()), "copies": int(copy.sum()),
            "busy_ns": iv.length(iv.union(s, e)), "comm_ns": iv.length(iv.union(s[comm], e[comm])),
            "copy_ns": iv.length(iv.union(s[copy], e[copy])), "start_ns": int(s.min()), "end_ns": int(e.max())}


def _cut_off_launches(trace: RankTrace, lo: int, hi: int, sets: Sets) -> int:
    """Launch calls in the last step, after its last launch that produced device work, with none of their own."""
    if sets.mode != "gpu":
        return 0
    host = trace.host_ops
    start = host["start_ns"]
    launch = (host["correlation"] >= 0) & isin(host["cat"], ("cuda_runtime", "cuda_driver")) \
        & matches(host["name"], LAUNCH_NAMES, "search") & (start >= lo) & (start < hi)
    rows = np.flatnonzero(launch)
    if rows.size == 0:
        return 0
    # Rows that launched device work (a sorted search: np.isin would sort with np.unique, loading numpy.ma).
    made = np.sort(trace.device_ops["launch_idx"])
    at = np.minimum(np.searchsorted(made, rows), max(made.size - 1, 0))
    produced = (made[at] == rows) if made.size else np.zeros(rows.size, dtype=bool)
    if not produced.any():
        return 0
    t = start[rows]
    last_ok = t[produced].max()
    return int(((~produced) & (t > last_ok)).sum())


def step_metrics(sets: Sets, w: Windows) -> Table:
    """Every metric of every window at once (vectorised over windows)."""
    overlap_set = iv.intersect(sets.compute, sets.comm)
    duration = w.end - w.start
    compute = iv.length_in(sets.compute, w.start, w.end)
    comm = iv.length_in(sets.comm, w.start, w.end)
    overlap = iv.length_in(overlap_set, w.start, w.end)
    busy = iv.length_in(sets.busy, w.start, w.end)
    return Table({
        "step": w.step, "start_ns": w.start, "end_ns": w.end, "duration_ns": duration,
        "compute_ns": compute, "comm_ns": comm, "overlap_ns": overlap, "exposed_comm_ns": comm - overlap,
        "idle_ns": duration - busy, "copy_ns": iv.length_in(sets.copy, w.start, w.end),
        "memcpy_ns": iv.length_in(sets.memcpy, w.start, w.end), "memset_ns": iv.length_in(sets.memset, w.start, w.end),
        "complete": w.complete,
    })


def collective_exposure(trace: RankTrace, sets: Sets) -> Table:
    """Per collective: its interval and the part of it no compute covered (``coll_idx``: its collectives row)."""
    coll = trace.collectives
    dev_idx = coll["device_idx"]
    if sets.mode == "gpu":
        ops = trace.device_ops
        sel = np.flatnonzero(dev_idx >= 0)
        sel = sel[ops["device"][dev_idx[sel]] == sets.device]
        rows = dev_idx[sel]
        step = ops["step"][rows]
    else:
        ops = trace.host_ops
        sel = np.flatnonzero(dev_idx < 0)
        rows = coll["host_idx"][sel]
        step = _host_step(trace, ops["start_ns"][rows])
    name = ops["name"][rows].to_numpy()
    s, e = ops["start_ns"][rows], ops["end_ns"][rows]
    covered = iv.length_in(sets.compute, s, e)
    return Table({
        "step": step, "device_idx": rows if sets.mode == "gpu" else np.full(sel.size, -1, dtype=np.int64),
        "name": name, "op": coll["op"][sel], "bytes": coll["bytes"][sel],
        "start_ns": s, "duration_ns": e - s, "exposed_ns": (e - s) - covered, "coll_idx": sel,
    })


def _host_step(trace: RankTrace, t: np.ndarray) -> np.ndarray:
    steps = trace.steps.sort_by("start_ns")
    return step_of(t, steps["start_ns"], steps["end_ns"], steps["step"])
