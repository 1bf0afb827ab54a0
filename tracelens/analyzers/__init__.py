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
    # The rank analyzers (and numpy with them) load only when a rank is analysed: a report whose files'
    # analyses are all in the warm cache only combines them.
    if name == "analyze_rank":
        from .rank import analyze_rank     # lazy: numpy and the rank analyzers (the comment above)

        return analyze_rank
    if name == "combine":
        from .run import combine           # lazy: numpy and the run analyzers

        return combine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def analyze(traces: list[RankTrace], thresholds: Thresholds | None = None) -> Report:
    """The overlap report and the diagnoses of a run (one RankTrace per rank): each rank analysed, then
    combined."""
    # lazy: numpy and the analyzers, as in __getattr__
    from .rank import analyze_rank
    from .run import combine

    context = Context(thresholds or Thresholds())
    return combine([analyze_rank(t, context) for t in traces], context)
