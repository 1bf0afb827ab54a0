"""Stragglers where no collective was matched across ranks: a rank whose steps or compute take longer than the
other ranks'.

Only a fallback: with collectives matched, the rank the others wait for is found from its arrivals
(crossrank/straggler.py), and step times would name the ranks that wait. Per rank, the median step duration
and the median compute time over its complete steps; across ranks, the median of those medians. A rank more
than ``straggler_min_excess`` above the ranks' median in either is flagged (docs/metrics.md, "Stragglers"),
and for its compute only when its steps are not shorter than the ranks' (a rank with more compute but shorter
steps holds nobody up). Why the rank is slow is not analysed here.
"""

from __future__ import annotations

import numpy as np

from ...contract import RankResult
from ..thresholds import Thresholds, material
from ..wording import Finding


def _median(values: list[int]) -> int:
    return int(round(float(np.median(np.asarray(values, dtype=np.int64)))))


def find(ranks: list[RankResult], th: Thresholds) -> list[Finding]:
    rows = []
    for r in ranks:
        done = [s for s in r.steps if s.complete]
        if done:
            rows.append((r.rank, len(done), _median([s.duration_ns for s in done]),
                         _median([s.compute_ns for s in done]), r.mode == "cpu"))
    if len(rows) < 2:
        return []
    step_all, compute_all = _median([x[2] for x in rows]), _median([x[3] for x in rows])
    out = []
    for rank, n, step_ns, compute_ns, cpu in rows:
        step_excess = (step_ns - step_all) / step_all if step_all > 0 else None
        compute_excess = (compute_ns - compute_all) / compute_all if compute_all > 0 else None
        over = {k: v for k, v in (("step-time", step_excess), ("compute-time", compute_excess))
                if v is not None and v > th.straggler_min_excess}
        if step_excess is not None and step_excess < 0:
            over.pop("compute-time", None)
        if not over:
            continue
        verdict, _ = max(over.items(), key=lambda kv: kv[1])     # the larger excess names the title
        impact = max(step_ns - step_all, compute_ns - compute_all)
        important = material(th, impact, step_all)
        out.append(Finding(
            id="straggler", severity="warning" if important else "info", rank=rank, step=None,
            verdict=verdict,
            evidence={"step_ns": step_ns, "ranks_step_ns": step_all, "compute_ns": compute_ns,
                      "ranks_compute_ns": compute_all, "step_excess": step_excess, "compute_excess": compute_excess,
                      "steps": n, "ranks": len(rows), "impact_ns": impact, "material": important, "cpu": cpu}))
    return out
