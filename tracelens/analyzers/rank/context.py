"""What the per-rank analyzers share, so none of them takes a long argument list."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model import RankTrace
from ...table import Table
from ...contract import StepMetrics
from ..thresholds import Thresholds
from .overlap import Sets, Windows


@dataclass
class RankContext:
    """One rank under analysis: its trace, the interval sets and step windows computed once, the step
    metrics, the per-collective exposure table and the thresholds."""

    trace: RankTrace
    thresholds: Thresholds
    sets: Sets
    windows: Windows
    steps: list[StepMetrics]
    exposure: Table

    @property
    def durations(self) -> np.ndarray:
        return self.windows.end - self.windows.start
