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
import pandas as pd

from ..model import RankTrace
from ..report import Diagnosis
from . import intervals as iv
from .thresholds import Thresholds

_MAX_KERNELS = 3


def _device_frame(trace: RankTrace, device: int) -> pd.DataFrame:
    dev = trace.device_ops
    keep = (dev["device"] == device).to_numpy() & (dev["kind"] != "sync").to_numpy()
    d = dev[keep]
    lidx = d["launch_idx"].to_numpy()
    host = trace.host_ops
    hs, he = host["start_ns"].to_numpy(), host["end_ns"].to_numpy()
    ok = lidx >= 0
    if not ok.any():
        lidx, hs, he = np.full(lidx.size, -1), np.zeros(1, np.int64), np.zeros(1, np.int64)
    return pd.DataFrame({
        "row": np.flatnonzero(keep), "kind": d["kind"].to_numpy(), "name": d["name"].to_numpy(),
        "stream": d["stream"].to_numpy(), "start": d["start_ns"].to_numpy(), "end": d["end_ns"].to_numpy(),
        # Activities with no known launch are treated as launched before everything (possible dependencies).
        "launch": np.where(ok, hs[np.maximum(lidx, 0)], np.iinfo(np.int64).min),
        "launch_end": np.where(ok, he[np.maximum(lidx, 0)], np.iinfo(np.int64).min),
        "linked": ok}).sort_values("start", kind="stable").reset_index(drop=True)


def findings(trace: RankTrace, device: int, exposure: pd.DataFrame, th: Thresholds) -> pd.DataFrame:
    """One row per exposed comm activity with a launch-order problem: kind, delay and kernels involved."""
    d = _device_frame(trace, device)
    exposed_rows = exposure["device_idx"].to_numpy()[exposure["exposed_ns"].to_numpy() > 0]
    comm = d[(d["kind"] == "comm").to_numpy() & d["linked"].to_numpy() & np.isin(d["row"].to_numpy(), exposed_rows)]
    if comm.empty:
        return pd.DataFrame(columns=["kind", "start", "launch", "name", "stream", "delay_ns", "exposed_ns", "kernels"])
    exposed = dict(zip(exposure["device_idx"].to_numpy().tolist(), exposure["exposed_ns"].to_numpy().tolist()))
    names = d["name"].to_numpy()
    starts, ends, launches = d["start"].to_numpy(), d["end"].to_numpy(), d["launch"].to_numpy()
    compute = (d["kind"] == "compute").to_numpy()
    longest = int((ends - starts).max()) if len(d) else 0
    rows = []
    for c in comm.itertuples():
        exp_ns = exposed.get(c.row, 0)
        if exp_ns <= 0:
            continue
        lo, hi = c.launch_end, c.start
        if hi - lo > th.launch_prompt_ns:                       # (a): it waited after its launch
            a, b = np.searchsorted(starts, [lo - longest, hi])
            idx = np.arange(a, b)
            idx = idx[ends[idx] > lo]
            later = idx[compute[idx] & (launches[idx] > c.launch) & (starts[idx] >= lo)]
            earlier = idx[launches[idx] < c.launch]
            if later.size:
                wait = iv.clip(iv.union(starts[later], ends[later]), lo, hi)
                delay = iv.length(iv.subtract(wait, iv.union(starts[earlier], ends[earlier])))
                if delay >= th.launch_min_delay_ns:
                    rows.append(("queued", c.start, c.launch, c.name, c.stream, delay, exp_ns,
                                 _names(names[later])))
            continue
        # (b): prompt start; compute launched before it was running when it was launched.
        a, b = np.searchsorted(starts, [c.launch - longest, c.launch], side="right")
        idx = np.arange(a, b)                                     # only these can still run at the launch
        running = idx[compute[idx] & (launches[idx] < c.launch) & (ends[idx] > c.launch)]
        if running.size:
            delay = int(c.launch - starts[running].min())
            if delay >= th.launch_min_delay_ns:
                rows.append(("late", c.start, c.launch, c.name, c.stream, delay, exp_ns,
                             _names(names[running])))
    return pd.DataFrame(rows, columns=["kind", "start", "launch", "name", "stream", "delay_ns", "exposed_ns",
                                       "kernels"])


def _names(names: np.ndarray) -> list[str]:
    seen: list[str] = []
    for n in map(str, names.tolist()):
        if n not in seen:
            seen.append(n)
    return seen[:_MAX_KERNELS]


def analyze(trace: RankTrace, device: int, exposure: pd.DataFrame, windows, durations: np.ndarray,
            th: Thresholds) -> list[Diagnosis]:
    f = findings(trace, device, exposure, th)
    if f.empty:
        return []
    w = np.searchsorted(windows.start, f["start"].to_numpy(), side="right") - 1
    f["window"] = np.where((w >= 0) & (f["start"].to_numpy() < windows.end[np.maximum(w, 0)]), w, -1)
    connections = trace.meta.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    out = []
    for win, g in f[f["window"] >= 0].groupby("window", sort=True):
        out.append(_diagnosis(trace.meta.rank, int(windows.step[win]), g, int(durations[win]), connections, th))
    return out


def _short(name: str) -> str:
    name = name.removeprefix("void ")
    base = name.split("(")[0]
    return base if len(base) <= 60 else base[:59] + "…"


def _diagnosis(rank, step, g: pd.DataFrame, duration: int, connections: str | None, th) -> Diagnosis:
    queued, late = g[g["kind"] == "queued"], g[g["kind"] == "late"]
    setting = f"CUDA_DEVICE_MAX_CONNECTIONS={connections} in this run" if connections is not None \
        else "CUDA_DEVICE_MAX_CONNECTIONS was not recorded"
    parts, advice = [], []
    if not queued.empty:
        worst = queued.loc[queued["delay_ns"].idxmax()]
        parts.append(f"{len(queued)} comm kernel(s) waited {queued['delay_ns'].sum() / 1e6:.2f} ms behind compute "
                     f"launched after them (worst: {_short(worst['name'])} behind {_short(worst['kernels'][0])}, "
                     f"{worst['delay_ns'] / 1e6:.2f} ms)")
        advice.append("set CUDA_DEVICE_MAX_CONNECTIONS=1 so kernels start in launch order"
                      if connections != "1" else
                      "kernels already start in launch order here: check what the collective waits on")
    if not late.empty:
        worst = late.loc[late["delay_ns"].idxmax()]
        parts.append(f"{len(late)} comm kernel(s) were launched {late['delay_ns'].sum() / 1e6:.2f} ms after compute "
                     f"they could have overlapped had started (worst: {_short(worst['name'])} launched "
                     f"{worst['delay_ns'] / 1e6:.2f} ms into {_short(worst['kernels'][0])})")
        advice.append(f"launch the collective before {_short(worst['kernels'][0])} (issue it as soon as its "
                      "input is ready)")
    hideable = int(np.minimum(g["delay_ns"].to_numpy(), g["exposed_ns"].to_numpy()).sum())
    severity = "critical" if duration > 0 and hideable >= th.critical_exposed_fraction * duration else "warning"
    kinds = " and ".join(k for k, part in (("queued behind later-launched compute", queued),
                                             ("launched too late", late)) if not part.empty)
    title = f"launch order: exposed communication {kinds}"
    return Diagnosis(
        id="launch-order", severity=severity, rank=rank, step=None if step < 0 else step, title=title,
        detail="; ".join(parts) + f"; up to {hideable / 1e6:.2f} ms could be hidden ({setting})",
        advice="; ".join(advice),
        evidence={"cuda_device_max_connections": connections, "hideable_ns": hideable, "collectives": [
            {"kind": r.kind, "name": str(r.name), "stream": int(r.stream), "start_ns": int(r.start),
             "launch_ns": int(r.launch), "delay_ns": int(r.delay_ns), "exposed_ns": int(r.exposed_ns),
             "kernels": list(r.kernels)} for r in g.itertuples(index=False)]})
