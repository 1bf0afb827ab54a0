"""Sync stalls: host calls that wait for the device in the middle of a step.

A synchronizing call (``.item()``/``.cpu()``/``.tolist()`` → ``cudaStreamSynchronize``,
``torch.cuda.synchronize()`` → ``cudaDeviceSynchronize``, event syncs, synchronous or pageable copies, and
device sync records that no host call explains) blocks the CPU until the device drains; the device then
waits for the CPU to launch again, and any collective in flight has to finish first. Per call:

- ``blocked_ns``: the call's duration (the CPU was waiting);
- ``idle_after_ns``: device idle from when it drained, while the call waited, to the next activity after
  the call returned; 0 when the device was still busy on another stream, or already idle when the call
  began (the host was behind: the call waited on nothing). One idle stretch counts once, for the first
  call that waited through its drain;
- ``idle_caused_ns``: what the call cost the device, ``min(idle_after_ns, blocked_ns)``: the idle after it
  until the next device work (the launch gap it opened), no more than the host was held. Without the wait the
  host would have reached its next launch at most ``blocked_ns`` sooner, so idle beyond that is host time the
  device would have idled through anyway (a C program's host work between iterations). A call during which
  the device stayed busy costs it nothing, however long the CPU waited: blocked time is context, not cost;
- ``comm_in_flight_ns``: communication running on the device while the CPU was blocked;
- ``end_of_step``: nothing was launched after it in its step (a timing or logging sync: info only);
- ``feeds``: the collective its scope issues after it (``all_to_all``: the host needed the value, such as
  an all-to-all's split sizes), None otherwise.

Calls are aggregated per call site (the CPU-op ancestry and the nearest Python frame) and step.
"""

from __future__ import annotations

import re

import numpy as np

from ...model.columns import Lookup, isin, matches
from ...model.linking import take
from ...model import RankTrace
from .. import intervals as iv
from .overlap import LAUNCH_NAMES
from ..thresholds import material
from ..wording import Finding
from .context import RankContext

_SYNC_CALLS = re.compile(
    r"^(cuda|hip)(Stream|Device|Event)Synchronize$|^cu(Stream|Ctx|Event)Synchronize$"
    r"|^(cuda|hip)Memcpy(2D|3D|ToSymbol|FromSymbol|Peer)?$|^(cuda|hip)Memset(2D|3D)?$"
    r"|^cuMemcpy(DtoH|HtoD|DtoD|Peer)?(_v2)?$|^hipMemcpyWithStream$")
_ASYNC_COPIES = re.compile(r"^(cuda|hip)Memcpy(2D|3D)?Async$|^cuMemcpy(DtoH|HtoD)Async(_v2)?$")
_HOST_STALL_SYNCS = ("Stream Sync", "Context Sync", "Event Sync")
_CHAIN_CATS = ("cpu_op", "user_annotation")
_MAX_CHAIN = 6
_SOURCE_FRAME = re.compile(r"\.py\(\d+\)")


def stall_calls(trace: RankTrace, device: int) -> dict[str, np.ndarray]:
    """Every host call (or unexplained device sync) that made the host wait, one row each, by start time.

    Columns: ``host_idx`` (-1 for a device sync record), ``call`` (names, object array), ``start_ns``,
    ``end_ns``. A step holds a handful of these, so they stay plain arrays rather than a DataFrame.
    """
    host, dev = trace.host_ops, trace.device_ops
    runtime = isin(host["cat"], ("cuda_runtime", "cuda_driver"))
    blocking = runtime & matches(host["name"], _SYNC_CALLS)
    # Async copies block the host when they involve pageable memory.
    on_dev = dev["device"] == device
    launch = dev["launch_idx"]
    pageable = on_dev & isin(dev["kind"], ("memcpy",)) & matches(dev["name"], "Pageable", "search") & (launch >= 0)
    async_rows = launch[pageable]
    async_rows = async_rows[runtime[async_rows] & matches(host["name"], _ASYNC_COPIES)[async_rows]]
    blocking[async_rows] = True
    rows = np.flatnonzero(blocking)
    # Device sync records whose host call is not in the trace still mark a stall.
    orphan = np.flatnonzero(on_dev & isin(dev["kind"], ("sync",)) & isin(dev["name"], _HOST_STALL_SYNCS)
                            & (launch < 0))
    start = np.concatenate([host["start_ns"][rows], dev["start_ns"][orphan]])
    order = np.argsort(start, kind="stable")
    return {
        "host_idx": np.concatenate([rows, np.full(orphan.size, -1)]).astype(np.int64)[order],
        "call": np.array(Lookup(host["name"]).many(rows.tolist()) + Lookup(dev["name"]).many(orphan.tolist())
                         + [None], dtype=object)[:-1][order],
        "start_ns": start[order],
        "end_ns": np.concatenate([host["end_ns"][rows], dev["end_ns"][orphan]])[order]}


def measure(calls, busy: iv.IntervalSet, comm: iv.IntervalSet, launches: np.ndarray,
            win_start: np.ndarray, win_end: np.ndarray, win_step: np.ndarray) -> dict[str, np.ndarray]:
    """The calls' columns plus step, blocked, idle-after, comm-in-flight and end-of-step (vectorised)."""
    s, e = np.asarray(calls["start_ns"], dtype=np.int64), np.asarray(calls["end_ns"], dtype=np.int64)
    w = np.searchsorted(win_start, s, side="right") - 1
    inside = (w >= 0) & (s < win_end[np.maximum(w, 0)])
    bs, be = busy
    i = np.searchsorted(bs, e, side="right") - 1            # the last busy interval starting by the return
    has_prev = i >= 0
    prev_end = take(be, i, -1)        # no busy interval at all (only zero-length kernels): every i is -1
    still_busy = has_prev & (prev_end > e)
    drained = np.where(has_prev, prev_end, s)
    nxt = take(bs, np.where(i + 1 < bs.size, i + 1, -1), -1)
    # Only a call that was waiting when the device drained made it idle: one that began after the drain
    # found an idle device (the host was already behind), and one idle stretch is charged to one call.
    waited = has_prev & ~still_busy & (nxt >= 0) & (drained > s)
    first = np.zeros_like(waited)
    _, at = np.unique(i[waited], return_index=True)
    first[np.flatnonzero(waited)[at]] = True
    idle = np.where(first, nxt - drained, 0)
    later = np.searchsorted(launches, e, side="right")
    limit = np.searchsorted(launches, win_end[np.maximum(w, 0)], side="left")
    idle = np.maximum(idle, 0)
    return {**{c: np.asarray(calls[c]) for c in calls},
            "window": np.where(inside, w, -1), "step": np.where(inside, win_step[np.maximum(w, 0)], -1),
            "blocked_ns": e - s, "idle_after_ns": idle, "idle_caused_ns": np.minimum(idle, e - s),
            "comm_in_flight_ns": iv.length_in(comm, s, e), "end_of_step": later >= limit, "drained_ns": drained}


def chains(trace: RankTrace, host_rows: np.ndarray) -> tuple[list[str], list[str | None]]:
    """For each host row: its CPU-op ancestry ``outer → … → call`` and the nearest Python frame."""
    host = trace.host_ops
    parent = host["parent"]
    name = Lookup(host["name"])                 # per-row strings only for the rows a chain visits
    cat = Lookup(host["cat"])
    memo: dict[int, tuple[tuple[str, ...], str | None]] = {}

    def up(row: int) -> tuple[tuple[str, ...], str | None]:
        path, frame, cur = [], None, row
        while cur >= 0 and cur not in memo:
            path.append(cur)
            cur = parent[cur]
        ops, frame = memo.get(cur, ((), None)) if cur >= 0 else ((), None)
        for r in reversed(path):                 # outermost first
            if cat[r] == "python_function":
                ops = ()                          # ops below the innermost Python frame are the site
                if _SOURCE_FRAME.search(name[r]):  # the innermost line of source, not a built-in method
                    frame = name[r]
            elif cat[r] in _CHAIN_CATS and not name[r].startswith("ProfilerStep#"):
                ops = ops + (name[r],)
            memo[r] = (ops, frame)
        return memo[row]

    out_chain, out_frame = [], []
    for row in host_rows.tolist():
        if row < 0:
            out_chain.append("")
            out_frame.append(None)
            continue
        ops, frame = up(int(parent[row])) if parent[row] >= 0 else ((), None)
        out_chain.append(" → ".join(list(ops[-(_MAX_CHAIN - 1):]) + [name[row]]))
        out_frame.append(frame)
    return out_chain, out_frame


_A2A = re.compile(r"all_?to_?all", re.IGNORECASE)


def feeds(trace: RankTrace, host_rows: np.ndarray) -> list[str | None]:
    """For each host row: ``all_to_all`` when the scope it runs in (its outermost enclosing op or annotation
    below the ProfilerStep) issues an all-to-all on the same thread after it returns: the host read the
    value to size that collective (its split sizes), so the read cannot simply be made asynchronous."""
    host = trace.host_ops
    out: list[str | None] = [None] * host_rows.size
    if not host_rows.size or not len(host):
        return out
    cat = host["cat"]
    a2a = np.flatnonzero(isin(cat, _CHAIN_CATS) & matches(host["name"], _A2A, "search"))
    if not a2a.size:
        return out
    parent, start, end, pid, tid = (host[c] for c in ("parent", "start_ns", "end_ns", "pid", "tid"))
    step = matches(host["name"], r"ProfilerStep#")
    for i, row in enumerate(host_rows.tolist()):
        if row < 0:
            continue
        top, cur = -1, int(parent[row])
        while cur >= 0 and not step[cur]:
            top, cur = cur, int(parent[cur])
        if top < 0:
            continue
        hit = a2a[(pid[a2a] == pid[row]) & (tid[a2a] == tid[row]) & (start[a2a] >= end[row])
                  & (start[a2a] < end[top])]
        if hit.size:
            out[i] = "all_to_all"
    return out


def analyze(ctx: RankContext) -> list[Finding]:
    """Sync-stall findings of one rank (``ctx``: its :class:`~.context.RankContext`)."""
    trace, device, busy, comm = ctx.trace, ctx.sets.device, ctx.sets.busy, ctx.sets.comm
    windows, durations, th = ctx.windows, ctx.durations, ctx.thresholds
    calls = stall_calls(trace, device)
    if not calls["start_ns"].size:
        return []
    host = trace.host_ops
    is_launch = isin(host["cat"], ("cuda_runtime", "cuda_driver")) & matches(host["name"], LAUNCH_NAMES, "search")
    launches = np.sort(host["start_ns"][is_launch])
    if windows.step.size == 1 and windows.step[0] < 0:
        # No steps: the one window spans the device work; syncs just outside it still belong to the run.
        m = measure(calls, busy, comm, launches, windows.start, windows.end, windows.step)
        m["window"], m["step"] = np.zeros_like(m["window"]), np.full_like(m["step"], -1)
    else:
        # A host call belongs to the step whose host span holds it: the device windows run later than the
        # host (the GPU finishes step N while the CPU is already in step N+1), and a call at the start of
        # step N+1 is not the end of step N. Spans in window order (both sorted by start).
        spans = trace.steps.sort_by("start_ns")
        m = measure(calls, busy, comm, launches, spans["start_ns"], spans["end_ns"],
                    windows.step)
    chain, frame = chains(trace, m["host_idx"])
    m["site"] = [c or call for c, call in zip(chain, m["call"].tolist())]
    m["frame"] = frame
    m["feeds"] = feeds(trace, m["host_idx"])
    # A stall is a call that cost the device time; one the device worked through is a wait, not a stall.
    m["significant"] = m["idle_caused_ns"] >= th.stall_min_ns
    # A step holds a handful of syncs: plain lists per window beat a pandas groupby (bench/RESULTS.md,
    # "analyzers/rank/syncs.py").
    window = m["window"]
    rows = np.flatnonzero(window >= 0)
    rows = rows[np.argsort(window[rows], kind="stable")]
    columns = {c: list(m[c]) if isinstance(m[c], list) else m[c].tolist() for c in _SITE_COLUMNS}
    program = ctx.program
    out = []
    for part in np.split(rows, np.flatnonzero(np.diff(window[rows])) + 1) if rows.size else []:
        w = int(window[part[0]])
        group = {c: [v[i] for i in part.tolist()] for c, v in columns.items()}
        out.append(_finding(trace.meta.rank, windows.step[w], group, int(durations[w]), program, th))
    return out


_SITE_COLUMNS = ("site", "end_of_step", "call", "frame", "significant", "blocked_ns", "idle_after_ns",
                 "idle_caused_ns", "comm_in_flight_ns", "start_ns", "feeds")


def _sites(group: dict[str, list]) -> list[dict]:
    """Calls aggregated per call site (and end-of-step or not); stalls first, the costliest first."""
    acc: dict[tuple[str, bool], dict] = {}
    for site, end_of_step, call, frame, significant, blocked, idle, caused, comm, start, fed in zip(
            *(group[c] for c in _SITE_COLUMNS)):
        key = (site, bool(end_of_step))
        a = acc.get(key)
        if a is None:
            acc[key] = a = {"site": site, "call": call, "python_frame": None, "calls": 0, "stalls": 0,
                            "blocked_ns": 0, "max_blocked_ns": int(blocked), "idle_after_ns": 0,
                            "idle_caused_ns": 0, "comm_in_flight_ns": 0, "end_of_step": bool(end_of_step),
                            "first_ns": int(start), "stall_ns": 0, "feeds": None}
        if a["python_frame"] is None and isinstance(frame, str):
            a["python_frame"] = frame                       # the first call that knows its Python line
        a["feeds"] = a["feeds"] or fed
        a["calls"] += 1
        a["stalls"] += int(bool(significant))
        a["stall_ns"] += int(caused) if significant else 0
        a["blocked_ns"] += int(blocked)
        a["max_blocked_ns"] = max(a["max_blocked_ns"], int(blocked))
        a["idle_after_ns"] += int(idle)
        a["idle_caused_ns"] += int(caused)
        a["comm_in_flight_ns"] += int(comm)
        a["first_ns"] = min(a["first_ns"], int(start))
    return sorted(acc.values(), key=lambda x: (x["stalls"] == 0, x["end_of_step"], -x["idle_caused_ns"],
                                               -x["blocked_ns"]))


def _finding(rank, step, group, duration, program, th) -> Finding:
    sites = _sites(group)
    stalls = [x for x in sites if x["stalls"]]
    mid = [x for x in stalls if not x["end_of_step"]]
    idle = sum(x["idle_after_ns"] for x in sites)
    blocked = sum(x["blocked_ns"] for x in sites)
    # What the mid-step stalls cost: the device idle they caused, never the CPU's blocked time.
    impact = sum(x["stall_ns"] for x in mid)
    important = material(th, impact, duration)
    if not mid or not important:
        severity = "info"
    elif duration > 0 and impact >= th.stall_critical_fraction * duration:
        severity = "critical"
    else:
        severity = "warning"
    # A long wait at the end of the step (timing, logging) is named as such; a long wait mid-step that the
    # device worked through is the CPU waiting for work already queued: a wait, not a stall.
    at_end = stalls or any(x["end_of_step"] and x["max_blocked_ns"] >= th.stall_min_ns for x in sites)
    waited = any(x["max_blocked_ns"] >= th.stall_min_ns for x in sites)
    return Finding(id="sync-stall", severity=severity, rank=rank, step=None if step < 0 else int(step),
                   verdict="stall" if mid else "end-of-step" if at_end else "host-wait" if waited else "brief",
                   evidence={"calls": sum(x["calls"] for x in sites), "stalls": sum(x["stalls"] for x in sites),
                             "blocked_ns": blocked, "idle_after_ns": idle,
                             "idle_caused_ns": sum(x["idle_caused_ns"] for x in sites), "mid_step_sites": len(mid),
                             "duration_ns": duration, "impact_ns": impact, "material": important,
                             "program": program, "sites": sites})
