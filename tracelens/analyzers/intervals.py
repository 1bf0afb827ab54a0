"""Interval algebra on int64 nanosecond intervals, vectorised with numpy.

Every interval is half-open, ``[start, end)``. A *set* is a pair of int64 arrays ``(starts, ends)``
that is sorted, disjoint and without zero-length members; :func:`union` turns any bag of intervals
into a set. All other operations take sets and return sets or lengths. This is the only place in the
project that combines intervals; analyzers build on it and tests check it against a brute-force oracle.

Method: union is a sort plus a running maximum of ends (a new member starts where a start exceeds
every earlier end). Intersection and difference sweep the boundaries of two sets with weights
+1/-1 (first set) and +2/-2 (second set): the running sum is 1 inside the first only, 2 inside the
second only and 3 inside both. Lengths inside many windows at once use the cumulative covered
length ``F(t) = |S ∩ (-inf, t)|``, so ``|S ∩ [a, b)| = F(b) - F(a)``.
"""

from __future__ import annotations

import numpy as np

IntervalSet = tuple[np.ndarray, np.ndarray]

_EMPTY = np.empty(0, dtype=np.int64)


def empty() -> IntervalSet:
    return _EMPTY, _EMPTY


def union(starts, ends) -> IntervalSet:
    """Merge any intervals (overlapping, touching, unsorted) into a set."""
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return empty()
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    # A member begins where the start lies beyond everything seen so far (touching intervals merge).
    begins = np.empty(s.size, dtype=bool)
    begins[0] = True
    begins[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], reach[last]


def length(iset: IntervalSet) -> int:
    """Total covered length of a set."""
    s, e = iset
    return int((e - s).sum())


def _sweep(a: IntervalSet, b: IntervalSet):
    t = np.concatenate([a[0], a[1], b[0], b[1]])
    w = np.concatenate([
        np.full(a[0].size, 1, np.int8), np.full(a[0].size, -1, np.int8),
        np.full(b[0].size, 2, np.int8), np.full(b[0].size, -2, np.int8),
    ])
    order = np.argsort(t, kind="stable")
    t, w = t[order], w[order]
    level = np.cumsum(w, dtype=np.int8)
    return t[:-1], t[1:], level[:-1]


def _select(a: IntervalSet, b: IntervalSet, state: int) -> IntervalSet:
    if a[0].size == 0 or (b[0].size == 0 and state != 1):
        return empty()
    if b[0].size == 0:
        return a
    seg_s, seg_e, level = _sweep(a, b)
    pick = level == state
    return union(seg_s[pick], seg_e[pick])


def intersect(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Points covered by both sets."""
    return _select(a, b, 3)


def subtract(a: IntervalSet, b: IntervalSet) -> IntervalSet:
    """Points of ``a`` not covered by ``b``."""
    return _select(a, b, 1)


def clip(iset: IntervalSet, lo: int, hi: int) -> IntervalSet:
    """The part of a set inside ``[lo, hi)``; only the members that reach into it are touched (a set is
    sorted and disjoint, so its ends are sorted too), which keeps per-step clipping of a long run cheap."""
    s, e = iset
    a, b = int(np.searchsorted(e, lo, side="right")), int(np.searchsorted(s, hi, side="left"))
    s, e = s[a:max(a, b)], e[a:max(a, b)]
    s2, e2 = np.maximum(s, lo), np.minimum(e, hi)
    keep = e2 > s2
    return s2[keep], e2[keep]


def close_gaps(iset: IntervalSet, min_gap: int) -> IntervalSet:
    """The set with every gap shorter than ``min_gap`` filled (members closer than that become one): what a
    drawing at a resolution of ``min_gap`` per pixel can show."""
    s, e = iset
    if s.size == 0:
        return iset
    begins = np.empty(s.size, dtype=bool)
    begins[0] = True
    begins[1:] = s[1:] - e[:-1] >= min_gap
    first = np.flatnonzero(begins)
    last = np.append(first[1:] - 1, s.size - 1)
    return s[first], e[last]


def clip_many(iset: IntervalSet, lo, hi) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The set clipped to every window ``[lo_k, hi_k)`` at once: (window index, starts, ends), grouped by
    window in the windows' order, members in order within a window. A member that spans several windows
    appears once in each."""
    s, e = iset
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    first = np.searchsorted(e, lo, side="right")                 # first member ending after lo
    count = np.maximum(np.searchsorted(s, hi, side="left") - first, 0)
    window = np.repeat(np.arange(lo.size), count)
    member = np.arange(int(count.sum())) - np.repeat(np.cumsum(count) - count, count) + np.repeat(first, count)
    s2, e2 = np.maximum(s[member], lo[window]), np.minimum(e[member], hi[window])
    keep = e2 > s2
    return window[keep], s2[keep], e2[keep]


def covered_before(iset: IntervalSet, t) -> np.ndarray:
    """``F(t) = |set ∩ (-inf, t)|`` for each t (vectorised)."""
    s, e = iset
    t = np.asarray(t, dtype=np.int64)
    if s.size == 0:
        return np.zeros(t.shape, dtype=np.int64)
    cum = np.concatenate([[0], np.cumsum(e - s)])
    i = np.searchsorted(s, t, side="right") - 1
    inside = np.clip(t - s[np.maximum(i, 0)], 0, (e - s)[np.maximum(i, 0)])
    return np.where(i >= 0, cum[np.maximum(i, 0)] + inside, 0)


def length_in(iset: IntervalSet, lo, hi) -> np.ndarray:
    """``|set ∩ [lo_k, hi_k)|`` for every window k at once."""
    lo = np.asarray(lo, dtype=np.int64)
    hi = np.asarray(hi, dtype=np.int64)
    return np.maximum(covered_before(iset, hi) - covered_before(iset, lo), 0)
