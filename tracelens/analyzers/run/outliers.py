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
    _, g = np.unique(np.asarray(group, dtype=np.int64), return_inverse=True)
    g = g.reshape(-1)
    n = int(g.max()) + 1 if g.size else 0
    med = group_median(d, g, n)
    mad = group_median(np.abs(d - med[g]), g, n)
    limit = np.where(np.bincount(g, minlength=n) >= min_group,
                     med + np.maximum(k * MAD_SIGMA * mad, floor_ns), np.inf)
    median = np.floor(med).astype(np.int64)[g]
    finite = np.isfinite(limit)
    whole = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    whole[finite] = np.floor(limit[finite]).astype(np.int64)
    return Flagged(d > limit[g], median, whole[g])


def group_median(values: np.ndarray, group: np.ndarray, n: int) -> np.ndarray:
    """The median of ``values`` within each group 0..n-1 (0 for an empty group), vectorised."""
    out = np.zeros(n, dtype=np.float64)
    if not len(values):
        return out
    cnt = np.bincount(group, minlength=n)
    if cnt.min() == cnt.max() and np.all(group[:-1] <= group[1:]):
        # Rows grouped in order, every group the same size (matched instances with the same members, the
        # usual case): one row each, a partition along it.
        m = int(cnt[0])
        table = values.astype(np.float64).reshape(n, m)
        lo, hi = (m - 1) // 2, m // 2
        part = np.partition(table, sorted({lo, hi}), axis=1)
        return (part[:, lo] + part[:, hi]) / 2
    order = np.lexsort((values, group))
    v = values[order].astype(np.float64)
    first = np.cumsum(cnt) - cnt
    has = cnt > 0
    lo = first + (cnt - 1) // 2
    hi = first + cnt // 2
    out[has] = (v[lo[has]] + v[hi[has]]) / 2
    return out
