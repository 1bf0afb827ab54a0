"""Host nesting: the array solution must equal the reference stack walk, event for event."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from tracelens.model import linking


def stack_walk(thread, start, end, slack):
    """The definition, written out plainly: per thread, over events sorted by (start, longest first), the
    parent is the latest-started earlier event still open at the start (a zero-length event at an exact
    end counts as inside) that lasts until the event's end, give or take ``slack``."""
    parent = np.full(len(start), -1, dtype=np.int64)
    order = sorted(range(len(start)), key=lambda i: (thread[i], start[i], -end[i], i))
    seen = []
    current = None
    for i in order:
        if thread[i] != current:
            current, seen = thread[i], []
        for j in reversed(seen):
            open_at_start = end[j] > start[i] or end[j] == start[i] == end[i]
            if open_at_start and end[j] + slack >= end[i]:
                parent[i] = j
                break
        seen.append(i)
    return parent


def nested(draw_tree):
    """Properly nested intervals (the usual trace) from a random tree of (offset, length) children."""
    out = []

    def place(lo, hi, children, depth):
        t = lo
        for gap, length, sub in children:
            s = min(t + gap, hi)
            e = min(s + length, hi)
            out.append((s, e))
            if depth < 4:
                place(s, e, sub, depth + 1)
            t = max(e, t)

    place(0, 400, draw_tree, 0)
    return out


leaf = st.tuples(st.integers(0, 6), st.integers(0, 30), st.just([]))
tree = st.recursive(st.lists(leaf, max_size=5),
                    lambda kids: st.lists(st.tuples(st.integers(0, 6), st.integers(0, 60), kids), max_size=5),
                    max_leaves=30)
loose = st.lists(st.tuples(st.integers(0, 40), st.integers(0, 12)), max_size=30)


def check(pairs, threads, scale=1, slack=0):
    start = np.array([a * scale for a, _ in pairs], dtype=np.int64)
    end = np.array([b * scale for _, b in pairs], dtype=np.int64)
    thread = np.array(threads[:len(pairs)] + [0] * (len(pairs) - len(threads)), dtype=np.int64)
    got = linking.host_parents(thread, start, end, slack * scale)
    want = stack_walk(thread.tolist(), start.tolist(), end.tolist(), slack * scale)
    # Exact duplicates may nest either way round; compare what is unambiguous: the parent's interval.
    gi = [None if p < 0 else (int(thread[p]), int(start[p]), int(end[p])) for p in got]
    wi = [None if p < 0 else (int(thread[p]), int(start[p]), int(end[p])) for p in want]
    assert gi == wi


@settings(max_examples=400, deadline=None)
@given(tree, st.lists(st.integers(0, 2), max_size=40))
def test_nested_events_match_stack_walk(children, threads):
    check(nested(children), threads)


@settings(max_examples=400, deadline=None)
@given(loose, st.lists(st.integers(0, 2), max_size=40), st.integers(0, 3))
def test_partial_overlaps_and_ties_match_stack_walk(pairs, threads, slack):
    check([(a, a + d) for a, d in pairs], threads, slack=slack)


@settings(max_examples=200, deadline=None)
@given(loose, st.lists(st.integers(0, 2), max_size=40), st.integers(0, 3))
def test_time_spans_too_wide_for_relative_keys_match_stack_walk(pairs, threads, slack):
    # 2**52 ns steps: span x events x threads passes 2**62, so the nesting pass ranks the times instead of
    # using them relative to the first start; order and ties are unchanged, so the answer must be too.
    check([(a, a + d) for a, d in pairs], threads, scale=2**52, slack=slack)


def test_threads_solved_together_never_borrow_a_parent_from_another_thread():
    # Found by hypothesis: thread 1 holds [0,1], [1,2] and the zero-length [1,1]; thread 0 holds zero-length
    # ranges at 1 too. The stack walk puts thread 1's [1,1] under its own [1,2] (row 8), never under a
    # thread-0 event; the all-threads pass must notice and fall back.
    pairs = [(0, 0), (0, 0), (0, 1), (0, 1), (1, 1), (1, 1), (1, 1), (1, 1), (1, 2)]
    check(pairs, [0, 0, 0, 1, 0, 0, 0, 1, 1])
    thread = np.array([0, 0, 0, 1, 0, 0, 0, 1, 1])
    got = linking.host_parents(thread, np.array([a for a, _ in pairs]), np.array([b for _, b in pairs]))
    assert got[7] == 8


def test_nested_path_is_taken_for_proper_nesting():
    # Hand-made: [0,10] holds [2,4] and [4,9]; [4,9] holds the zero-length [9,9] at its very end.
    st_, en = np.array([0, 2, 4, 9]), np.array([10, 4, 9, 9])
    assert linking._parents_nested(st_, en).tolist() == [-1, 0, 0, 2]
    # [0,10] and [5,15] overlap partially: no nested answer, the stack walk decides: 5 ns past its end is
    # timer rounding ([5,15] under [0,10]), unless the slack is under 5 ns.
    assert linking._parents_nested(np.array([0, 5]), np.array([10, 15])) is None
    assert linking.host_parents(np.zeros(2, np.int64), np.array([0, 5]), np.array([10, 15])).tolist() == [-1, 0]
    assert linking.host_parents(np.zeros(2, np.int64), np.array([0, 5]), np.array([10, 15]), 4).tolist() == [-1, -1]


def test_profiler_step_started_inside_the_optimizer_step_is_nobodys_child():
    # From a real H100 recording (sample_traces/cuda_nccl_item, µs after ProfilerStep#3's start): the
    # collector steps the schedule from an optimizer post-hook, so ProfilerStep#4 [5396.6, 10827.2] starts
    # inside Optimizer.step [5111.8, 5414.6] and outlives it by 5.4 ms; aten::item [9895.0, 10493.8] of the
    # next step must sit under ProfilerStep#4 alone, not under the optimizer step of the step before.
    us = np.array
    start = (us([0.0, 5111.8, 5396.6, 9895.0]) * 1000).astype(np.int64)
    end = (us([5363.1, 5414.6, 10827.2, 10493.8]) * 1000).astype(np.int64)
    got = linking.host_parents(np.zeros(4, np.int64), start, end)
    # Optimizer.step outlives ProfilerStep#3 by 51.5 µs: top level too.
    assert got.tolist() == [-1, -1, -1, 2]


@settings(max_examples=300, deadline=None)
@given(loose, st.lists(st.integers(0, 2), max_size=40))
def test_thread_start_order_is_the_lexsort(pairs, threads):
    # The fast ordering must be np.lexsort((-end, start, thread)) exactly, ties (equal start and end) included.
    start = np.array([a for a, _ in pairs], dtype=np.int64)
    end = np.array([a + d for a, d in pairs], dtype=np.int64)
    thread = np.array(threads[:len(pairs)] + [0] * (len(pairs) - len(threads)), dtype=np.int64)
    assert linking._thread_start_order(thread, start, end).tolist() == np.lexsort((-end, start, thread)).tolist()
