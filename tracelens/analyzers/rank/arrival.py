"""What a rank did before it arrived at each of its collectives (docs/metrics.md, "The culprit's reason").

The run verdict names the rank the others wait for and why it is late. Why is read here, where the trace is:
for every collective instance of the rank (a row of its comm table) the *lead* runs from the end of the
rank's last collective of the same process group (else of the same stream) in an earlier step to this one's
start; in the group's first step, from the start of its step window. A collective ends at about the same time
on every member (the transfer ends when the last member's does), and the one that ends a step is waited for by
the next step's work, so that is where the ranks last met; the lead is what the rank did from there until it
came to this collective. Later collectives of a step lead from the same point: a rank that came late to the
first one and runs on late is late for the same reason, not for the compute that followed. The lead is split,
on the analysed device, into:

- ``compute``: compute kernels ran (on CPU backends: the main thread's ops, data loading left out);
- ``sync``: the device was idle after a blocking sync drained it (idle stretches that began while a
  synchronizing call waited: the host had to launch again before the device could work);
- ``launch``: other device idle while the host's main thread was running ops (the CPU launched late);
- ``host``: other device idle while the main thread ran no op or was loading data (the CPU idle, a data
  loader, work the profiler does not see);
- the rest of the lead: other device work (copies, other collectives).

``combine`` compares the culprit's lead components with the other ranks' at the same instances; the
largest excess names the reason (analyzers/run/crossrank/straggler.py).
"""

from __future__ import annotations

import numpy as np

from ...model.columns import isin, matches
from ...model.linking import main_thread
from ...model import RankTrace
from .. import intervals as iv
from ..seam import LEAD_COLUMNS
from . import syncs
from .overlap import Sets, Windows
from .context import RankContext

_HOST_WORK = ("cpu_op", "cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime")
DATA_LOADING = r"DataLoader"       # torch's enumerate(DataLoader)#...__next__ ranges


def leads(ctx: RankContext) -> dict[str, np.ndarray]:
    """The lead columns (LEAD_COLUMNS) of every comm-table row."""
    trace, sets, windows, comm = ctx.trace, ctx.sets, ctx.windows, ctx.comm
    start, end = comm["start_ns"], comm["end_ns"]
    n = len(start)
    lo = _lead_start(comm, windows)
    lead = np.maximum(start - lo, 0)
    a, b = lo, np.maximum(start, lo)
    if sets.mode == "gpu":
        compute_set = sets.compute
        sync_set, launch_set, host_set = _idle_causes(trace, sets, windows)
    else:
        data = _main_thread_set(trace, data_loading=True)
        compute_set = iv.subtract(sets.compute, data)
        sync_set = launch_set = iv.empty()
        host_set = None
    compute = iv.length_in(compute_set, a, b)
    out = {"lead_ns": lead, "lead_compute_ns": compute,
           "lead_sync_ns": iv.length_in(sync_set, a, b), "lead_launch_ns": iv.length_in(launch_set, a, b)}
    # On a CPU backend the main thread is the device: whatever is not its compute is the host's.
    out["lead_host_ns"] = lead - compute if host_set is None else iv.length_in(host_set, a, b)
    return {c: np.ascontiguousarray(out[c], dtype=np.int64) if n else np.empty(0, np.int64) for c in LEAD_COLUMNS}


def _lead_start(comm: dict[str, np.ndarray], windows: Windows) -> np.ndarray:
    """Per row: the end of the last row of its process group (else stream) in an earlier step; a group's rows
    in the first step with any start at their step window's start (their own start outside every window)."""
    start, end, step = comm["start_ns"], comm["end_ns"], comm["step"]
    n = len(start)
    if not n:
        return np.empty(0, np.int64)
    pg = comm["pg_name"]
    names: dict = {}
    key = np.array([names.setdefault(p, len(names)) if isinstance(p, str) else -1 for p in pg.tolist()],
                   dtype=np.int64)
    # Rows of no named group fall back to their stream (ids are distinct from the group codes).
    key = np.where(key >= 0, key, len(names) + comm["stream"] - int(comm["stream"].min(initial=0)))
    order = np.lexsort((start, key))
    k, st = key[order], step[order]
    # The first row of each run of one group and one step; the row before it ended the group's previous step.
    run = np.ones(n, dtype=bool)
    run[1:] = (k[1:] != k[:-1]) | (st[1:] != st[:-1])
    head = np.maximum.accumulate(np.where(run, np.arange(n), 0))
    before = head - 1
    same = (before >= 0) & (k[np.maximum(before, 0)] == k)
    prev_end = np.full(n, -1, dtype=np.int64)
    prev_end[order[same]] = end[order[np.maximum(before, 0)][same]]
    w = np.searchsorted(windows.start, start, side="right") - 1
    inside = (w >= 0) & (start < windows.end[np.maximum(w, 0)])
    first = np.where(inside, windows.start[np.maximum(w, 0)], start)
    return np.where(prev_end >= 0, prev_end, first)


def _main_thread_set(trace: RankTrace, data_loading: bool) -> iv.IntervalSet:
    """The main thread's host work (ops and runtime calls, data loading left out) or its data loading."""
    host = trace.host_ops
    main = main_thread(host)
    if main is None:
        return iv.empty()
    on = (host["pid"] == main[0]) & (host["tid"] == main[1])
    data = on & matches(host["name"], DATA_LOADING, "search")
    rows = data if data_loading else on & isin(host["cat"], _HOST_WORK) & ~data
    return iv.union(host["start_ns"][rows], host["end_ns"][rows])


def _idle_causes(trace: RankTrace, sets: Sets, windows: Windows):
    """The device's idle time within the step windows, split into sync, launch and host (module docstring)."""
    if not windows.start.size:
        return iv.empty(), iv.empty(), iv.empty()
    frame = iv.union(windows.start, windows.end)
    idle = iv.subtract(frame, sets.busy)
    gs, ge = idle
    calls = syncs.stall_calls(trace, sets.device)
    # A gap is the sync's when it began while a synchronizing call waited: start in (call start, call end].
    waiting = iv.union(calls["start_ns"] + 1, calls["end_ns"] + 1)
    i = np.searchsorted(waiting[0], gs, side="right") - 1
    by_sync = (i >= 0) & (gs < waiting[1][np.maximum(i, 0)]) if waiting[0].size else np.zeros(gs.size, bool)
    sync = (gs[by_sync], ge[by_sync])
    rest = (gs[~by_sync], ge[~by_sync])
    busy_host = _main_thread_set(trace, data_loading=False)
    return sync, iv.intersect(rest, busy_host), iv.subtract(rest, busy_host)
