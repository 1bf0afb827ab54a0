"""The DDP bucket model: wait-free backpropagation (WFBP, shared reference metrics.md §6) fitted to a rank's
observed data-parallel all-reduces, predicting the exposed communication of other bucket sizes.

Per step, the buckets are the step's ``dp`` all-reduces in start order. The backward's compute time ``Tb``
comes from the compute between the first bucket's start (its gradients were ready: the comm stream was
free) and the end of the compute before the last bucket started (the end of the backward): that stretch is
the backward less the first bucket's share, ``Tb = K(first start, backward end) × G / (G − s₁)`` with ``G``
the gradient bytes and ``s₁`` the first bucket's (``× n / (n − 1)`` for ``n`` buckets of unknown size).
Transfer time is ``t(s) = α + s / B``, fitted by least squares over every bucket of the rank when the trace
gives at least two bucket sizes and the fit is physical (``α ≥ 0``, ``B`` below any link's); otherwise ``α``
is unknown (taken as 0), the model says why (``no_fit``) and no bucket size is suggested.

The model (§6): gradients become ready at a constant rate over ``Tb``, last layer first; bucket i's all-reduce
starts at max(ready_i, previous end) and takes t(s_i); exposed = max(0, last end − Tb). Candidate caps lay
the gradients out as DDP does: its first bucket as observed (DDP's first_bucket_cap, 1 MiB by default), then
buckets of the cap, the rest in the last.
"""

from __future__ import annotations

from math import fsum

import numpy as np

from ...model.columns import distinct
from ...contract import BucketModel, BucketPrediction
from .. import intervals as iv
from ..thresholds import material
from ..wording import Finding
from .context import RankContext

MIB = 1 << 20                               # bucket_cap_mb counts MiB (torch: bucket_cap_mb * 1024 * 1024)
CAPS_MIB = (1, 2, 5, 10, 25, 50, 100, 250)


def exposed(sizes, backward_ns: float, latency_ns: float, ns_per_unit: float) -> float:
    """Exposed communication of one backward under WFBP with these bucket sizes (last layer first)."""
    total = float(sum(sizes))
    ready = free = 0.0
    for s in sizes:
        ready += backward_ns * s / total
        free = max(ready, free) + latency_ns + s * ns_per_unit
    return max(0.0, free - backward_ns)


def layout(total: int, first: int, cap: int) -> list[int]:
    """DDP's buckets of ``total`` bytes under ``cap``: the first bucket, then full buckets, then the rest."""
    first = min(first, total)
    k, rest = divmod(total - first, cap)
    return [first] + [cap] * k + ([rest] if rest else [])


# No link or memory moves a collective's bytes faster (NVLink 5: 900 GB/s each way; one GPU's HBM3e: 8 TB/s):
# a fitted bandwidth above this says the durations do not grow with the size, not that the link is fast.
MAX_FIT_GBPS = 10_000.0


def _fit(sizes: np.ndarray, durations: np.ndarray) -> tuple[tuple[float, float] | None, str | None]:
    """((α, ns per byte), None) by least squares, or (None, why there is no fit).

    The sums are exact (``math.fsum``) over the sizes and durations less their means: the same numbers
    on every machine and numpy release, and no cancellation between the bytes' square (~10^15) and the
    intercept. A fit that is not physical is no fit: the model then treats the sizes as unknown."""
    if distinct(sizes).size < 2:
        return None, "one bucket size: latency and bandwidth cannot be told apart"
    s = sizes.astype(float).tolist()
    d = durations.astype(float).tolist()
    s_mean, d_mean = fsum(s) / len(s), fsum(d) / len(d)
    sxx = fsum((x - s_mean) ** 2 for x in s)
    sxy = fsum((x - s_mean) * (y - d_mean) for x, y in zip(s, d))
    slope = sxy / sxx
    if slope <= 0:
        return None, "the all-reduce durations do not grow with the bucket size"
    if 1.0 / slope > MAX_FIT_GBPS:
        return None, (f"the fitted bandwidth, {1.0 / slope:.3g} GB/s, is above any link's "
                      f"({MAX_FIT_GBPS:,.0f} GB/s): the durations barely grow with the bucket size")
    latency = d_mean - slope * s_mean
    if latency < 0:
        return None, (f"the fitted latency is negative ({latency / 1e3:,.1f} µs): the durations do not "
                      "follow latency + size / bandwidth")
    return (latency, slope), None


def model(ctx: RankContext, dims: np.ndarray) -> BucketModel | None:
    """The bucket model of a rank whose data-parallel all-reduces come in at least two buckets per step
    (``dims``: the parallelism dimension of each comm-table row)."""
    comm, compute, steps = ctx.comm, ctx.sets.compute, ctx.steps
    sel = (dims == "dp") & (comm["op"] == "all_reduce") & (comm["step"] >= 0)
    if not sel.any():
        return None
    step, start, end, size = (comm[c][sel] for c in ("step", "start_ns", "end_ns", "bytes"))
    order = np.lexsort((start, step))
    step, start, end, size = step[order], start[order], end[order], size[order]
    dur = end - start
    windows = {s.step: (s.start_ns, s.end_ns) for s in steps}
    exposed_of = {}
    rows = []
    for st in distinct(step).tolist():
        at = np.flatnonzero(step == st)
        if at.size < 2 or st not in windows:
            continue
        # The observed exposed time is the buckets' own (the all-reduces), not the dimension's: a broadcast in
        # the same group is no bucket, and the sentence compares all-reduce with all-reduce.
        exposed_of[st] = iv.length(iv.clip(iv.subtract(iv.union(start[at], end[at]), compute), *windows[st]))
        first, last = start[at[0]], start[at[-1]]
        before = iv.clip(compute, first, last)
        if before[0].size == 0:
            continue
        known = bool((size[at] > 0).all())
        share = (size[at].sum() / (size[at].sum() - size[at[0]])) if known else at.size / (at.size - 1)
        backward = iv.length(iv.clip(compute, first, int(before[1][-1]))) * share
        rows.append((st, at, backward, known))
    if not rows:
        return None
    # The median step (by backward time) stands for the rank: its buckets, its backward.
    st, at, backward, known = sorted(rows, key=lambda r: (r[2], r[0]))[(len(rows) - 1) // 2]
    all_at = np.concatenate([r[1] for r in rows])
    if known and (size[all_at] > 0).all():
        fit, no_fit = _fit(size[all_at], dur[all_at])
    else:
        fit, no_fit = None, "the trace records no bucket sizes"
    if fit is not None:
        latency, per = fit
        sizes = size[at].tolist()
    else:
        # Sizes or latency unknown: equal buckets, each taking the median observed duration.
        latency, per, sizes = 0.0, float(np.median(dur[at])), [1] * at.size
    observed = sorted(exposed_of[r[0]] for r in rows)[(len(rows) - 1) // 2]
    preds = []
    total = int(sum(sizes))
    if fit is not None:
        for cap in CAPS_MIB:
            b = layout(total, sizes[0], cap * MIB)
            preds.append(BucketPrediction(cap_mib=cap, buckets=len(b),
                                          exposed_ns=round(exposed(b, backward, latency, per))))
    else:
        one = exposed([1], backward, latency, per * at.size)        # every bucket's time in one all-reduce
        preds.append(BucketPrediction(cap_mib=None, buckets=1, exposed_ns=round(one)))
    best = min(preds, key=lambda p: (p.exposed_ns, -(p.cap_mib or 0))) if fit is not None else None
    return BucketModel(
        step=int(st), buckets=int(at.size), gradient_bytes=total if fit is not None else None,
        first_bucket_bytes=int(sizes[0]) if fit is not None else None, backward_ns=round(backward),
        latency_ns=None if fit is None else round(latency),
        bucket_ns=round(per) if fit is None else None,
        gbps=None if fit is None else 1.0 / per,          # bytes per ns = GB/s
        observed_exposed_ns=int(observed), model_exposed_ns=round(exposed(sizes, backward, latency, per)),
        predictions=preds, suggested_cap_mib=None if best is None else best.cap_mib,
        suggested_exposed_ns=None if best is None else best.exposed_ns, no_fit=no_fit)


def finding(ctx: RankContext, m: BucketModel | None) -> Finding | None:
    """A ``bucket-size`` finding when the suggested cap would hide a material share of the step."""
    rank, steps, th = ctx.rank, ctx.steps, ctx.thresholds
    if m is None or m.suggested_cap_mib is None or not steps:
        return None
    gain = m.observed_exposed_ns - m.suggested_exposed_ns
    step_ns = sorted(s.duration_ns for s in steps)[(len(steps) - 1) // 2]
    if not material(th, gain, step_ns):
        return None
    return Finding(id="bucket-size", severity="warning", rank=rank, step=None, verdict=None, evidence={
        "buckets": m.buckets, "step": m.step, "backward_ns": m.backward_ns, "latency_ns": m.latency_ns,
        "gbps": m.gbps, "observed_exposed_ns": m.observed_exposed_ns, "model_exposed_ns": m.model_exposed_ns,
        "suggested_cap_mib": m.suggested_cap_mib, "suggested_exposed_ns": m.suggested_exposed_ns,
        "gain_ns": gain, "duration_ns": step_ns, "impact_ns": gain, "material": True})
