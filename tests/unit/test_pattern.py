"""The overlap-pattern features, computed for all steps at once, against a step-by-step reference.

The reference below is the straightforward per-window computation (the definitions in docs/metrics.md,
"Overlap pattern"), kept here as the oracle for the vectorised :func:`pattern.step_features`.
"""

from collections import Counter

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelens.analyzers import intervals as iv
from tracelens.analyzers.rank.pattern import step_features
from tracelens.contract import PatternEvidence, ratio

def reference(compute: iv.IntervalSet, comm: iv.IntervalSet, lo: int, hi: int,
             comm_starts: np.ndarray, ops: list) -> PatternEvidence:
    """The evidence for one window; ``comm_starts``/``ops`` describe the comm activities starting in it."""
    c, k = iv.clip(comm, lo, hi), iv.clip(compute, lo, hi)
    comm_ns = iv.length(c)
    op = Counter(o for o in ops if isinstance(o, str)).most_common(1)
    op = op[0][0] if op else None
    first_comm = int(c[0][0]) if c[0].size else None
    compute_start = int(k[0][0]) if k[0].size else None
    if comm_ns == 0:
        return PatternEvidence(comm_kernels=int(comm_starts.size), bursts=0, started_during_compute=0,
                               compute_start_ns=compute_start, compute_phase_end_ns=None, first_comm_ns=first_comm,
                               first_comm_offset=None, tail_ns=0, tail_fraction=None, op=op)
    phase_end = _compute_phase_end(c, k, lo)
    tail = int(iv.length_in(c, [phase_end], [hi])[0])
    offset = None
    if compute_start is not None and phase_end > compute_start:
        offset = round((first_comm - compute_start) / (phase_end - compute_start), 4)
    return PatternEvidence(
        comm_kernels=int(comm_starts.size), bursts=_bursts(c, k),
        started_during_compute=int((comm_starts < phase_end).sum()) if compute_start is not None else 0,
        compute_start_ns=compute_start, compute_phase_end_ns=phase_end, first_comm_ns=first_comm,
        first_comm_offset=offset, tail_ns=tail, tail_fraction=ratio(tail, comm_ns), op=op)


def _gaps_with_compute(s: np.ndarray, e: np.ndarray, k: iv.IntervalSet) -> np.ndarray:
    """For consecutive members of a set: does compute run in the gap between member i and i+1?"""
    return iv.length_in(k, e[:-1], s[1:]) > 0


def _compute_phase_end(c: iv.IntervalSet, k: iv.IntervalSet, lo: int) -> int:
    """Where the step's exposed communication tail begins (the last comm end when there is none).

    Candidates are the starts of exposed pieces; the tail begins at the candidate p with the most
    ``exposed comm after p − compute after p (until the last comm ends)``, when that is positive. Compute
    between p and the end of communication means the compute phase was still going on, so a short exposed
    gap mid-step, or comm interleaved between compute kernels, does not open the tail; compute overlapping
    only the very end of the tail (an optimizer starting under gloo bookkeeping) does not close it. Only
    candidates before which at least half of the window's compute ran count: the phase is where the compute is.
    """
    exposed = iv.subtract(c, k)
    comm_end = int(c[1][-1])
    p = exposed[0]
    if p.size == 0:
        return comm_end
    exposed_after = np.cumsum((exposed[1] - exposed[0])[::-1])[::-1]
    compute_after = iv.length_in(k, p, np.full(p.size, comm_end))
    score = exposed_after - compute_after
    before = iv.length_in(k, np.full(p.size, lo), p)
    score = np.where(2 * before >= iv.length(k), score, np.iinfo(np.int64).min)
    best = int(np.argmax(score))
    return int(p[best]) if score[best] > 0 else comm_end


def _bursts(c: iv.IntervalSet, k: iv.IntervalSet) -> int:
    return 1 + int(_gaps_with_compute(c[0], c[1], k).sum())



intervals = st.lists(st.tuples(st.integers(0, 400), st.integers(0, 60)), max_size=30)


def as_set(pairs):
    return iv.union([a for a, _ in pairs], [a + d for a, d in pairs])


@settings(max_examples=400, deadline=None)
@given(intervals, intervals, st.lists(st.tuples(st.integers(0, 50), st.integers(0, 150)), max_size=6),
       st.lists(st.integers(0, 450), max_size=20))
def test_step_features_match_the_per_step_reference(comm, compute, steps, starts):
    C, K = as_set(comm), as_set(compute)
    lo, hi, t = [], [], 0
    for gap, width in steps:                      # sorted, disjoint windows, as step windows are
        lo.append(t + gap)
        hi.append(t + gap + width)
        t = hi[-1]
    lo, hi = np.array(lo, dtype=np.int64), np.array(hi, dtype=np.int64)
    comm_starts = np.sort(np.array(starts, dtype=np.int64))
    a, b = np.searchsorted(comm_starts, lo), np.searchsorted(comm_starts, hi)
    got = step_features(K, C, lo, hi, comm_starts, a, b)
    for k in range(lo.size):
        want = reference(K, C, int(lo[k]), int(hi[k]), comm_starts[a[k]:b[k]], [])
        assert got[k] == want, (k, got[k], want)


def test_the_compute_phase_is_where_the_compute_is():
    # A recommender-like step (issue 38): a long exposed all-to-all at 3 ms (it waits for its peers), then
    # 0.942 ms of the step's 1.246 ms of compute, then a short exposed all-reduce. The tail cannot begin at the
    # all-to-all, before most of the compute: it begins with the last exposed piece.
    K = iv.union([0, 5_000_000], [304_000, 5_942_000])            # 0.304 ms before the all-to-all, 0.942 after
    C = iv.union([3_000_000, 6_000_000], [4_900_000, 6_100_000])
    lo, hi = np.array([0]), np.array([7_000_000])
    starts = np.array([3_000_000, 6_000_000])
    (ev,) = step_features(K, C, lo, hi, starts, np.array([0]), np.array([2]))
    assert ev.compute_phase_end_ns == 6_000_000 and ev.tail_ns == 100_000
    assert 2 * iv.length(iv.clip(K, 0, ev.compute_phase_end_ns)) >= iv.length(K)
    # Before the rule, the all-to-all's start won: exposed after it 2.0 ms against 0.942 ms of compute.
    assert ev.started_during_compute == 1
