"""Analyzers: RankTraces in, a Report out. They never open files, print or exit.

``rank/`` analyses one rank's trace into a RankAnalysis (``analyze_rank``); ``run/`` puts RankAnalyses
together into the Report (``combine``). The seam between them is ``seam.py``: see docs/architecture.md.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .seam import Context, RankAnalysis
from .thresholds import Thresholds

if TYPE_CHECKING:  # pragma: no cover
    from ..contract import Report
    from ..model import RankTrace
    from .rank import analyze_rank
    from .run import combine

__all__ = ["analyze", "analyze_rank", "combine", "Context", "RankAnalysis", "Thresholds"]


def __getattr__(name: str):
    # A report whose files' analyses are all in the warm cache only combines them.
    if name == "analyze_rank":
        # lazy: the rank analyzers (and numpy), only when a rank is analysed
        from .rank import analyze_rank

        return analyze_rank
    if name == "combine":
        # lazy: combine, only when ranks are combined (a warm report's cache hit never does)
        from .run import combine

        return combine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def analyze(traces: list[RankTrace], thresholds: Thresholds | None = None) -> Report:
    """The overlap report and the diagnoses of a run (one RankTrace per rank): each rank analysed, then
    combined."""
    from .rank import analyze_rank  # lazy: importing analyzers must not load the rank analyzers
    from .run import combine  # lazy: nor combine

    context = Context(thresholds or Thresholds())
    return combine([analyze_rank(t, context) for t in traces], context)
