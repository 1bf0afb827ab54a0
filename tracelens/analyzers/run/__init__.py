"""Run-level analyzers: every rank's :class:`~..seam.RankAnalysis` in, the Report out.

They never see a trace. ``combine`` puts the ranks' shares together (in rank order, whatever order they
came in), runs the analyses across ranks (``summary``: the run's totals and pattern majority; ``straggler``)
and words every finding once (analyzers/wording.py).
"""

from __future__ import annotations

from typing import Iterable

from ...contract import Report
from ..seam import Context, RankAnalysis
from ..wording import diagnosis
from . import straggler, summary

# Findings of one rank and step are listed in this order.
_ORDER = {"no-gpu-activity": 0, "straggler": 1, "overlap-pattern": 2, "sync-stall": 3, "launch-order": 4,
          "memcpy-bound": 5}


def combine(analyses: Iterable[RankAnalysis], context: Context | None = None) -> Report:
    """The Report of a run from its ranks' analyses (any order; each rank's analysis once)."""
    th = (context or Context()).thresholds
    ordered = sorted(analyses, key=RankAnalysis.sort_key)
    ranks = [a.result for a in ordered]
    findings = [f for a in ordered for f in a.findings]
    findings += straggler.find(ranks, th)
    findings.sort(key=lambda f: (f.rank, -1 if f.step is None else f.step, _ORDER.get(f.id, 9)))
    return Report(inputs=[i for a in ordered for i in a.inputs], ranks=ranks, summary=summary.summarize(ranks),
                  collectives=[c for a in ordered for c in a.collectives],
                  warnings=[w for a in ordered for w in a.warnings],
                  diagnoses=[diagnosis(f) for f in findings])
