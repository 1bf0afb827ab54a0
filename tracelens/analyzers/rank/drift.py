"""Drift: whether a per-step quantity grows or shrinks over the capture (docs/metrics.md, "Drift").

The slope is Theil-Sen's (the median of the slopes between every two steps), which a few outlier steps do not
move; its confidence is Kendall's rank test of a monotonic trend. The first and last tenth of the steps are
compared by their medians, so that the finding says how much changed in the quantity's own unit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...model.columns import median

MAX_PAIRS_STEPS = 2000     # past this many steps the slopes come from an even sample of them (2 M pairs)


@dataclass(frozen=True)
class Trend:
    steps: int
    slope: float               # per step, in the values' unit (Theil-Sen)
    confidence: float          # 1 - p of Kendall's test (two-sided), 0..1
    first: float               # median of the first tenth of the steps
    last: float                # median of the last tenth
    median: float              # median of all steps

    @property
    def change(self) -> float:
        """The change from the first tenth to the last, as a share of the median (signed)."""
        return (self.last - self.first) / self.median if self.median else 0.0


def trend(values: np.ndarray) -> Trend | None:
    """The trend of ``values`` (one per step, in step order); None for fewer than 4 steps."""
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    if n < 4:
        return None
    x = np.arange(n, dtype=np.float64)
    if n > MAX_PAIRS_STEPS:
        pick = np.linspace(0, n - 1, MAX_PAIRS_STEPS).round().astype(np.int64)
        x, y_s = x[pick], y[pick]
    else:
        y_s = y
    i, j = np.triu_indices(x.size, k=1)
    dy = y_s[j] - y_s[i]
    slope = float(median(dy / (x[j] - x[i])))
    s = float(np.sign(dy).sum())
    m = x.size
    var = m * (m - 1) * (2 * m + 5) / 18.0
    z = (abs(s) - 1) / math.sqrt(var) if var > 0 and s != 0 else 0.0     # with the continuity correction
    confidence = 1.0 - math.erfc(max(z, 0.0) / math.sqrt(2))
    tenth = max(1, n // 10)
    return Trend(steps=n, slope=slope, confidence=confidence, first=float(median(y[:tenth])),
                 last=float(median(y[-tenth:])), median=float(median(y)))
