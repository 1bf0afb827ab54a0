"""Interval algebra against a brute-force oracle (one boolean per nanosecond)."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelens.analyzers import intervals as iv

SPAN = 200
ivs = st.lists(st.tuples(st.integers(0, SPAN), st.integers(0, 40)), max_size=25)


def as_set(pairs):
    s = np.array([a for a, _ in pairs], dtype=np.int64)
    e = np.array([a + d for a, d in pairs], dtype=np.int64)
    return iv.union(s, e)


def mask(pairs):
    m = np.zeros(SPAN + 41, dtype=bool)
    for a, d in pairs:
        m[a:a + d] = True
    return m


def set_mask(iset):
    m = np.zeros(SPAN + 41, dtype=bool)
    for a, b in zip(*iset):
        m[a:b] = True
    return m


def is_canonical(iset):
    s, e = iset
    return bool((e > s).all() and (s[1:] > e[:-1]).all())


@settings(max_examples=300, deadline=None)
@given(ivs)
def test_union_matches_oracle(a):
    u = as_set(a)
    assert is_canonical(u)
    assert (set_mask(u) == mask(a)).all()
    assert iv.length(u) == mask(a).sum()


@settings(max_examples=300, deadline=None)
@given(ivs, ivs)
def test_intersect_and_subtract_match_oracle(a, b):
    A, B = as_set(a), as_set(b)
    inter, diff = iv.intersect(A, B), iv.subtract(A, B)
    assert is_canonical(inter) and is_canonical(diff)
    assert (set_mask(inter) == (mask(a) & mask(b))).all()
    assert (set_mask(diff) == (mask(a) & ~mask(b))).all()
    # |A| = |A ∩ B| + |A \ B|
    assert iv.length(A) == iv.length(inter) + iv.length(diff)


@settings(max_examples=300, deadline=None)
@given(ivs, st.lists(st.tuples(st.integers(0, SPAN), st.integers(0, 60)), min_size=1, max_size=8))
def test_length_in_windows_matches_oracle(a, windows):
    A = as_set(a)
    lo = np.array([w[0] for w in windows])
    hi = np.array([w[0] + w[1] for w in windows])
    got = iv.length_in(A, lo, hi)
    m = mask(a)
    want = [m[x:y].sum() for x, y in zip(lo, hi)]
    assert got.tolist() == want
    for x, y, g in zip(lo, hi, got):
        assert iv.length(iv.clip(A, x, y)) == g


@settings(max_examples=300, deadline=None)
@given(ivs, st.lists(st.tuples(st.integers(0, 40), st.integers(0, 60)), min_size=0, max_size=8))
def test_clip_many_matches_clip_per_window(a, steps):
    A = as_set(a)
    # Sorted, disjoint windows, as step windows are: each starts at or after the previous end.
    lo, hi, t = [], [], 0
    for gap, width in steps:
        lo.append(t + gap)
        hi.append(t + gap + width)
        t = hi[-1]
    w, s, e = iv.clip_many(A, lo, hi)
    for k, (x, y) in enumerate(zip(lo, hi)):
        want = iv.clip(A, x, y)
        assert s[w == k].tolist() == want[0].tolist() and e[w == k].tolist() == want[1].tolist()
    assert w.tolist() == sorted(w.tolist())


def test_touching_intervals_merge_and_empty_inputs():
    # [0,5) and [5,9) touch: one member of length 9 (hand calculation).
    s, e = iv.union([5, 0], [9, 5])
    assert s.tolist() == [0] and e.tolist() == [9]
    assert iv.length(iv.intersect(iv.empty(), (s, e))) == 0
    assert iv.length(iv.subtract((s, e), iv.empty())) == 9
    assert iv.length_in(iv.empty(), [0], [10]).tolist() == [0]


def test_close_gaps_merges_only_gaps_below_the_resolution():
    # hand-made: gaps of 1, 5 and 10 ns between four members; a resolution of 5 closes only the 1 ns gap
    s, e = np.array([0, 11, 26, 46]), np.array([10, 21, 36, 50])
    got = iv.close_gaps((s, e), 5)
    assert got[0].tolist() == [0, 26, 46] and got[1].tolist() == [21, 36, 50]
    assert iv.close_gaps((s, e), 11)[0].tolist() == [0]
    assert iv.close_gaps(iv.empty(), 5)[0].size == 0
