"""Copy-bound steps (``memcpy-bound``): memory copies and sets that nothing overlapped fill most of a step.

Per step window W on the rank's main device, with X = ∪ memcpy/memset activities (copies that are not
communication) and K ∪ C the compute and communication sets: ``exposed_copy_ns = |(X ∖ (K ∪ C)) ∩ W|``, the
time the device did nothing but copy. A copy that runs under compute (a prefetch on a side stream) costs
the step nothing, so only exposed copy time counts. A step whose exposed copy time is at least
``copy_bound_fraction`` of its duration gets an entry, ``critical`` from ``copy_critical_fraction``.
"""

from __future__ import annotations

import re

import numpy as np

from ...model.columns import categorical_of, distinct, isin
from ...model import RankTrace
from .. import intervals as iv
from ..thresholds import material
from ..wording import Finding
from .context import RankContext

# Copy direction from the activity name: CUDA ``Memcpy HtoD (Pinned -> Device)``, ROCm ``CopyHostToDevice``.
_DIRECTION = re.compile(r"\b(HtoD|DtoH|DtoD|HtoH|HtoA|AtoH|AtoA|AtoD|DtoA)\b|(HostToDevice|DeviceToHost|DeviceToDevice"
                        r"|HostToHost)")
_LONG = {"HostToDevice": "HtoD", "DeviceToHost": "DtoH", "DeviceToDevice": "DtoD", "HostToHost": "HtoH"}
def _direction(name: str) -> str:
    m = _DIRECTION.search(name)
    if m is None:
        return "other"
    return m.group(1) or _LONG[m.group(2)]


def analyze(ctx: RankContext) -> list[Finding]:
    """Copy-bound findings of one rank (``ctx``: its :class:`~.context.RankContext`)."""
    trace, sets, windows, steps, th = ctx.trace, ctx.sets, ctx.windows, ctx.steps, ctx.thresholds
    if sets.copy[0].size == 0:
        return []
    lo, hi = windows.start, windows.end
    duration = hi - lo
    others = iv.union(np.concatenate([sets.compute[0], sets.comm[0]]), np.concatenate([sets.compute[1], sets.comm[1]]))
    exposed = iv.length_in(iv.subtract(sets.copy, others), lo, hi)
    share = np.divide(exposed, duration, out=np.zeros(duration.size), where=duration > 0)
    fire = np.flatnonzero((duration > 0) & (share >= th.copy_bound_fraction))
    if fire.size == 0:
        return []
    breakdown, pageable = _by_direction(trace, sets.device, lo[fire], hi[fire])
    breakdown["memset"] = iv.length_in(sets.memset, lo[fire], hi[fire])
    out, program = [], ctx.program
    for j, w in enumerate(fire.tolist()):
        st = steps[w]
        parts = {d: int(v[j]) for d, v in breakdown.items() if v[j] > 0}
        top = max(parts, key=parts.get) if parts else "other"
        is_material = material(th, int(exposed[w]), int(duration[w]))
        severity = "info" if not is_material else "critical" if share[w] >= th.copy_critical_fraction else "warning"
        out.append(Finding(
            id="memcpy-bound", severity=severity, rank=trace.meta.rank,
            step=None if windows.step[w] < 0 else int(windows.step[w]), verdict=None,
            evidence={"exposed_copy_ns": int(exposed[w]), "copy_fraction": float(share[w]), "copy_ns": st.copy_ns,
                      "memcpy_ns": st.memcpy_ns, "memset_ns": st.memset_ns, "duration_ns": st.duration_ns,
                      "compute_ns": st.compute_ns, "comm_ns": st.comm_ns, "by_direction": parts,
                      "pageable_ns": int(pageable[j]), "impact_ns": int(exposed[w]), "material": is_material,
                      "top_direction": top, "program": program}))
    return out


def _by_direction(trace: RankTrace, device: int, lo: np.ndarray, hi: np.ndarray):
    """Per copy direction, the length of the union of its copies inside each window; and the same for the
    copies from or to pageable memory."""
    ops = trace.device_ops
    rows = np.flatnonzero((ops["device"] == device) & isin(ops["kind"], ("memcpy",)))
    cat = categorical_of(ops["name"])
    if cat is not None:            # names are read once per distinct name among the copies
        codes = cat.codes[rows].astype(np.int64)
        used = distinct(codes)
        texts = [cat.categories[c] if c >= 0 else "" for c in used.tolist()]
        at = np.searchsorted(used, codes)
    else:
        texts = [str(n) for n in ops["name"][rows]]
        at = np.arange(rows.size)
    direction = np.array([_direction(t) for t in texts], dtype=object)[at]
    paged = np.array(["Pageable" in t for t in texts], dtype=bool)[at]
    s, e = ops["start_ns"][rows], ops["end_ns"][rows]
    out = {d: iv.length_in(iv.union(s[direction == d], e[direction == d]), lo, hi) for d in distinct(direction)}
    return out, iv.length_in(iv.union(s[paged], e[paged]), lo, hi)
