"""Launch order and hardware queues: why an exposed collective did not start under compute.

For each comm activity with exposed time, from its launch call (host, via correlation) and device times:

(a) *queued behind later-launched compute*: after its launch the comm waited, and during that wait compute
    launched after it ran while nothing launched before it (a possible dependency, the comm stream's
    earlier work) did. ``delay`` = that time. With several hardware connections
    (CUDA_DEVICE_MAX_CONNECTIONS > 1) a kernel launched later can take the SMs first.
(b) *launched too late*: the comm started promptly after its launch (it waited for nothing on the device),
    and compute launched before it was already running when it was launched. ``delay`` = how long that
    compute had been running; launching the comm earlier would have hidden up to ``min(delay, exposed)``.
"""

from __future__ import annotations

import numpy as np

from ...model.columns import distinct, isin
from ...model import RankTrace
from ...model.table import Labels, Table
from .. import intervals as iv
from ..thresholds import Thresholds, material
from ..wording import Finding
from .context import RankContext

_MAX_KERNELS = 3


def _device_arrays(trace: RankTrace, device: int) -> dict[str, np.ndarray]:
    """The device's non-sync activities as arrays sorted by start (names as categorical codes)."""
    dev = trace.device_ops
    keep = np.flatnonzero((dev["device"] == device) & ~isin(dev["kind"], ("sync",)))
    order = keep[np.argsort(dev["start_ns"][keep], kind="stable")]
    lidx = dev["launch_idx"][order]
    host = trace.host_ops
    ok = lidx >= 0
    safe = np.where(ok, lidx, 0)
    never = np.iinfo(np.int64).min
    kind = dev["kind"]
    return {
        "row": order, "kind": kind.codes[order], "name": dev["name"].codes[order],
        "stream": dev["stream"][order], "start": dev["start_ns"][order],
        "end": dev["end_ns"][order],
        # Activities with no known launch are treated as launched before everything (possible dependencies).
        "launch": np.where(ok, host["start_ns"][safe], never) if len(host) else np.full(order.size, never),
        "launch_end": np.where(ok, host["end_ns"][safe], never) if len(host) else np.full(order.size, never),
        "linked": ok}


def _code(categorical: Labels, value: str) -> int:
    return categorical.code(value)    # -2 matches no row (-1 is a missing value)


def findings(trace: RankTrace, device: int, exposure: Table, th: Thresholds) -> dict[str, np.ndarray]:
    """One row per exposed comm activity with a launch-order problem: kind, delay and kernels involved (as
    columns: a rank has a handful of rows, and a frame of them costs more than finding them)."""
    d = _device_arrays(trace, device)
    exposed = dict(zip(exposure["device_idx"].tolist(), exposure["exposed_ns"].tolist()))
    exposed_rows = exposure["device_idx"][exposure["exposed_ns"] > 0]
    kinds = trace.device_ops["kind"]
    comm = np.flatnonzero((d["kind"] == _code(kinds, "comm")) & d["linked"] & np.isin(d["row"], exposed_rows))
    columns = ["kind", "start", "launch", "name", "stream", "delay_ns", "exposed_ns", "kernels"]
    if not comm.size:
        return {c: np.empty(0, dtype=object if c in ("kind", "name", "kernels") else np.int64) for c in columns}
    names = trace.device_ops["name"].categories
    codes, starts, ends, launches = d["name"], d["start"], d["end"], d["launch"]
    compute = d["kind"] == _code(kinds, "compute")
    longest = int((ends - starts).max())
    lo_all, hi_all, launch_all = d["launch_end"][comm], starts[comm], launches[comm]
    # Candidate ranges for both cases, found for all collectives at once: (a) activities that can reach into
    # the wait [launch end, start); (b) activities that can still run at the launch.
    wait_a, wait_b = np.searchsorted(starts, lo_all - longest), np.searchsorted(starts, hi_all)
    run_a, run_b = (np.searchsorted(starts, launch_all - longest, side="right"),
                    np.searchsorted(starts, launch_all, side="right"))
    rows = []
    for i, row, start, launch, lo, stream, wa, wb, ra, rb in zip(
            comm.tolist(), d["row"][comm].tolist(), hi_all.tolist(), launch_all.tolist(), lo_all.tolist(),
            d["stream"][comm].tolist(), wait_a.tolist(), wait_b.tolist(), run_a.tolist(), run_b.tolist()):
        exp_ns = exposed.get(row, 0)
        hi = start
        if hi - lo > th.launch_prompt_ns:                       # (a): it waited after its launch
            s_, e_, l_ = starts[wa:wb], ends[wa:wb], launches[wa:wb]
            reach = e_ > lo
            later = reach & compute[wa:wb] & (l_ > launch) & (s_ >= lo)
            if later.any():
                earlier = reach & (l_ < launch)
                wait = iv.clip(iv.union(s_[later], e_[later]), lo, hi)
                delay = iv.length(iv.subtract(wait, iv.union(s_[earlier], e_[earlier])))
                if delay >= th.launch_min_delay_ns:
                    rows.append(("queued", start, launch, _name(names, codes[i]), stream, delay, exp_ns,
                                 _names(names, codes[wa:wb][later])))
            continue
        # (b): prompt start; compute launched before it was running when it was launched.
        running = compute[ra:rb] & (launches[ra:rb] < launch) & (ends[ra:rb] > launch)
        if running.any():
            delay = int(launch - starts[ra:rb][running].min())
            if delay >= th.launch_min_delay_ns:
                rows.append(("late", start, launch, _name(names, codes[i]), stream, delay, exp_ns,
                             _names(names, codes[ra:rb][running])))
    if not rows:
        return {c: np.empty(0, dtype=object if c in ("kind", "name", "kernels") else np.int64) for c in columns}
    return {c: _objects(v) if c in ("kind", "name", "kernels") else np.array(v, dtype=np.int64)
            for c, v in zip(columns, zip(*rows))}


def _objects(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)   # element by element: a list value stays one element
    for i, v in enumerate(values):
        out[i] = v
    return out


def _name(categories, code) -> str:
    return str(categories[code]) if code >= 0 else "None"


def _names(categories, codes: np.ndarray) -> list[str]:
    """The first few distinct kernel names, in order of appearance."""
    seen: list[int] = []
    for c in codes.tolist():
        if c not in seen:
            seen.append(c)
            if len(seen) == _MAX_KERNELS:
                break
    return [_name(categories, c) for c in seen]


def analyze(ctx: RankContext) -> list[Finding]:
    """Launch-order findings of one rank (``ctx``: its :class:`~.context.RankContext`)."""
    trace, device, exposure = ctx.trace, ctx.sets.device, ctx.exposure
    windows, durations, th = ctx.windows, ctx.durations, ctx.thresholds
    f = findings(trace, device, exposure, th)
    if not f["start"].size:
        return []
    w = np.searchsorted(windows.start, f["start"], side="right") - 1
    window = np.where((w >= 0) & (f["start"] < windows.end[np.maximum(w, 0)]), w, -1)
    connections = trace.meta.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    out = []
    for win in distinct(window[window >= 0]).tolist():
        g = {c: v[window == win] for c, v in f.items()}
        out.append(_finding(trace.meta.rank, int(windows.step[win]), g, int(durations[win]), connections, th))
    return out


def _kind(g: dict[str, np.ndarray], kind: str) -> dict | None:
    """The collectives of one kind in an entry: how many, their summed delay and the position (in the
    entry's ``collectives``) of the longest delay, the first of equals."""
    rows = np.flatnonzero(g["kind"] == kind)
    if not rows.size:
        return None
    delay = g["delay_ns"][rows]
    return {"count": int(rows.size), "delay_ns": int(delay.sum()), "worst": int(rows[np.argmax(delay)])}


def _finding(rank, step, g: dict[str, np.ndarray], duration: int, connections: str | None, th) -> Finding:
    hideable = int(np.minimum(g["delay_ns"], g["exposed_ns"]).sum())
    if not material(th, hideable, duration):
        severity = "info"
    else:
        severity = "critical" if duration > 0 and hideable >= th.critical_exposed_fraction * duration else "warning"
    return Finding(
        id="launch-order", severity=severity, rank=rank, step=None if step < 0 else step, verdict=None,
        evidence={"cuda_device_max_connections": connections, "hideable_ns": hideable, "duration_ns": duration,
                  "impact_ns": hideable, "material": material(th, hideable, duration),
                  "queued": _kind(g, "queued"), "late": _kind(g, "late"), "collectives": [
            {"kind": kind, "name": str(name), "stream": int(stream), "start_ns": int(start), "launch_ns": int(launch),
             "delay_ns": int(delay), "exposed_ns": int(exposed), "kernels": list(kernels)}
            for kind, start, launch, name, stream, delay, exposed, kernels in zip(
                *(g[c].tolist() for c in ("kind", "start", "launch", "name", "stream", "delay_ns", "exposed_ns",
                                         "kernels")))]})
