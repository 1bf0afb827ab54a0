"""Collective outliers: the instance that takes 40 ms where its kind takes 4 (docs/metrics.md, "Outliers").

Instances are grouped by what should make them equally long: operation, size bucket (a power of two) and
process group. Within a group, an instance is an outlier when its duration exceeds the group's median by more
than ``k`` robust standard deviations (1.4826 x the median absolute deviation) and by more than an absolute
floor, so that neither a noisy group nor a microsecond-long one raises an alarm.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAD_SIGMA = 1.4826         # a normal distribution's standard deviation per median absolute deviation


@dataclass(frozen=True)
class Flagged:
    outlier: np.ndarray        # bool per instance
    median_ns: np.ndarray      # the instance's group median (int64 per instance)
    limit_ns: np.ndarray       # the duration above which an instance of that group is an outlier


def size_bucket(nbytes: np.ndarray) -> np.ndarray:
    """A power-of-two bucket per size: instances within a factor of two are one kind (-1: size unknown)."""
    b = np.asarray(nbytes, dtype=np.int64)
    out = np.full(b.size, -1, dtype=np.int64)
    known = b > 0
    out[known] = np.floor(np.log2(b[known])).astype(np.int64)
    return out


def flag(duration_ns: np.ndarray, group: np.ndarray, *, k: float, floor_ns: int, min_group: int) -> Flagged:
    """Which instances are outliers of their group (``group``: an int64 id per instance). Groups smaller than
    ``min_group`` flag nothing: their median is no norm."""
    d = np.asarray(duration_ns, dtype=np.int64)
    g = np.asarray(group, dtype=np.int64)
    n = d.size
    median = np.zeros(n, dtype=np.int64)
    limit = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    if n == 0:
        return Flagged(np.zeros(0, bool), median, limit)
    order = np.lexsort((d, g))
    gs, ds = g[order], d[order]
    starts = np.flatnonzero(np.r_[True, gs[1:] != gs[:-1]])
    sizes = np.diff(np.r_[starts, n])
    for s, size in zip(starts.tolist(), sizes.tolist()):     # one pass per group, each vectorised
        vals = ds[s:s + size]
        med = int(np.median(vals))
        rows = order[s:s + size]
        median[rows] = med
        if size < min_group:
            continue
        mad = float(np.median(np.abs(vals - med)))
        limit[rows] = med + int(max(k * MAD_SIGMA * mad, floor_ns))
    return Flagged(d > limit, median, limit)
