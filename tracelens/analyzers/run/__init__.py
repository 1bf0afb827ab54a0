"""Run-level analyzers: every rank's :class:`~..seam.RankAnalysis` in, the Report out.

They never see a trace. ``combine`` puts the ranks' shares together (in rank order, whatever order they
came in), runs the analyses across ranks (``summary``: the run's totals and pattern majority; ``straggler``:
step and compute times; ``crossrank``: matched collectives, clocks, wait versus transfer, the rank the others
wait for, bandwidth) and words every finding once (analyzers/wording.py).
"""

from __future__ import annotations

from typing import Iterable

import msgspec

from ...contract import Report
from ..seam import Context, RankAnalysis
from ..wording import diagnosis
from . import crossrank, straggler, summary

# Findings of one rank and step are listed in this order.
_ORDER = {"no-gpu-activity": 0, "clock-offset": 1, "straggler": 1, "overlap-pattern": 2, "sync-stall": 3, "launch-order": 4,
          "memcpy-bound": 5}


def combine(analyses: Iterable[RankAnalysis], context: Context | None = None) -> Report:
    """The Report of a run from its ranks' analyses (any order; each rank's analysis once)."""
    th = (context or Context()).thresholds
    ordered = sorted(analyses, key=RankAnalysis.sort_key)
    across = crossrank.analyze(ordered, th)
    ranks = [_with_waits(p, a.result, across.steps) for p, a in enumerate(ordered)]
    findings = [f for a in ordered for f in a.findings]
    late = {f.rank for f in across.findings if f.id == "straggler"}
    # The rank the others wait for has one straggler entry: the cross-rank one, which names the cause.
    findings += [f for f in straggler.find(ranks, th) if f.rank not in late]
    findings += across.findings
    findings.sort(key=lambda f: (f.rank, -1 if f.step is None else f.step, _ORDER.get(f.id, 9)))
    return Report(inputs=[i for a in ordered for i in a.inputs], ranks=ranks, summary=summary.summarize(ranks),
                  collectives=[c for a in ordered for c in a.collectives],
                  warnings=[w for a in ordered for w in a.warnings] + across.warnings,
                  diagnoses=[diagnosis(f) for f in findings], cross_rank=across.cross)


def _with_waits(pos: int, result, sums: dict):
    """The rank's result with each step's cross-rank sums (a copy: analyses are never changed)."""
    if not sums:
        return result
    steps = []
    for s in result.steps:
        got = sums.get((pos, -1 if s.step is None else s.step))
        steps.append(s if got is None else msgspec.structs.replace(s, **{k: int(v) for k, v in got.items()}))
    return msgspec.structs.replace(result, steps=steps)
