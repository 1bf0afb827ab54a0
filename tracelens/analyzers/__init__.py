"""Analyzers: RankTraces in, a Report out. They never open files, print or exit.

``rank/`` analyses one rank's trace into a RankAnalysis (``analyze_rank``); ``run/`` puts RankAnalyses
together into the Report (``combine``). The seam between them is ``seam.py``: see docs/architecture.md.
"""

from __future__ import annotations

from ..model import RankTrace
from ..contract import Report
from .rank import analyze_rank
from .run import combine
from .seam import Context, RankAnalysis
from .thresholds import Thresholds

__all__ = ["analyze", "analyze_rank", "combine", "Context", "RankAnalysis", "Thresholds"]


def analyze(traces: list[RankTrace], thresholds: Thresholds | None = None) -> Report:
    """The overlap report and the diagnoses of a run (one RankTrace per rank): each rank analysed, then
    combined."""
    context = Context(thresholds or Thresholds())
    return combine([analyze_rank(t, context) for t in traces], context)
