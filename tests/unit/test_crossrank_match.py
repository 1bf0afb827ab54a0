"""Matching collectives across ranks on hand-made collective tables (analyzers/run/crossrank/match.py),
and the wait/transfer split of hand-made instances."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tracelens.analyzers.run.crossrank import match, waits
from tracelens.analyzers.seam import COMM_COLUMNS

MB = 1 << 20


def rank(rows: list[dict], steps_from: str = "markers"):
    """A stand-in RankAnalysis holding only the collective table (and where its steps came from): defaults for
    what a row leaves out."""
    base = dict(step=0, op="all_reduce", dtype="Float", bytes=4 * MB, group_size=-1, pg_name=None, pg_desc=None,
                seq=-1, start_ns=0, end_ns=10, exposed_ns=0, stream=13, launch_ns=-1, lead_ns=0, lead_compute_ns=0,
                lead_sync_ns=0, lead_launch_ns=0, lead_host_ns=0)
    full = [{**base, **r} for r in rows]
    comm = {c: np.array([r[c] for r in full], dtype=object if c in ("op", "dtype", "pg_name", "pg_desc") else
                        np.int64) for c in COMM_COLUMNS}
    return SimpleNamespace(comm=comm, result=SimpleNamespace(steps_from=steps_from))


def run(*ranks, groups=None):
    tab = match.concat(list(ranks))
    m = match.match(tab, np.arange(len(ranks)), groups or {})
    pairs = [sorted((int(tab.pos[r]), int(tab.cols["start_ns"][r])) for r in m.rows[s:e])
             for s, e in zip(m.starts, list(m.starts[1:]) + [len(m.rows)])]
    return m, pairs


def test_seq_keys_pair_repeated_seqs_by_occurrence():
    # Two kernels of one seq on each rank (a coalesced collective): the first with the first, by start.
    a = rank([dict(pg_name="0", seq=7, start_ns=100), dict(pg_name="0", seq=7, start_ns=200)])
    b = rank([dict(pg_name="0", seq=7, start_ns=150), dict(pg_name="0", seq=7, start_ns=250)])
    m, pairs = run(a, b)
    assert m.key == "pg-seq" and pairs == [[(0, 100), (1, 150)], [(0, 200), (1, 250)]] and m.unmatched == 0


def test_stream_order_uses_the_stream_ordinal_not_its_id():
    # nsys: rank 0's comm runs on stream 7, rank 1's on stream 15.
    a = rank([dict(stream=7, start_ns=0), dict(stream=7, start_ns=50)])
    b = rank([dict(stream=15, start_ns=5), dict(stream=15, start_ns=55)])
    m, pairs = run(a, b)
    assert m.key == "stream-order" and pairs == [[(0, 0), (1, 5)], [(0, 50), (1, 55)]]
    assert [w.code for w in m.warnings] == ["match-fallback"] and m.warnings[0].count == 4


def test_all_to_all_sizes_may_differ_but_all_reduce_sizes_may_not():
    a = rank([dict(pg_name="0", seq=0, op="all_to_all", bytes=3 * MB),
              dict(pg_name="0", seq=1, bytes=4 * MB, start_ns=20), dict(pg_name="0", seq=2, start_ns=40)])
    b = rank([dict(pg_name="0", seq=0, op="all_to_all", bytes=5 * MB),
              dict(pg_name="0", seq=1, bytes=8 * MB, start_ns=20), dict(pg_name="0", seq=2, start_ns=40)])
    m, pairs = run(a, b)
    # seq 0 matches; seq 1 disagrees on bytes, so seq 1 and the later seq 2 are never paired (4 rows).
    assert pairs == [[(0, 0), (1, 0)]] and m.unmatched == 4
    (w,) = m.warnings
    assert w.code == "collective-mismatch" and w.count == 4 and "bytes" in w.message


def test_a_missing_instance_in_order_keys_leaves_that_step_unmatched():
    # pg-order: rank 1 lost its second all-reduce of step 0. By index, rank 0's second would pair with rank
    # 1's third (and equal all-reduces validate): step 0 is not matched at all. Step 1 starts its own order
    # again, with two on each rank, and matches.
    a = rank([dict(pg_name="0", step=0, start_ns=t) for t in (0, 10, 20)] +
             [dict(pg_name="0", step=1, start_ns=t) for t in (100, 110)])
    b = rank([dict(pg_name="0", step=0, start_ns=t) for t in (1, 21)] +
             [dict(pg_name="0", step=1, start_ns=t) for t in (101, 111)])
    m, pairs = run(a, b)
    assert m.key == "pg-order"
    assert pairs == [[(0, 100), (1, 101)], [(0, 110), (1, 111)]]
    assert m.unmatched == 5
    assert [(w.code, w.count) for w in m.warnings] == [("unmatched-collectives", 5)]


def test_group_members_decide_who_must_be_present():
    # Group "tp" holds ranks 0 and 1 of the 3 given; its instances need only those two.
    a = rank([dict(pg_name="tp", seq=0)])
    b = rank([dict(pg_name="tp", seq=0, start_ns=3)])
    c = rank([dict(pg_name="dp", seq=0, start_ns=9)])
    m, pairs = run(a, b, c, groups={"tp": (0, 1), "dp": (1, 2)})
    assert pairs == [[(0, 0), (1, 3)]]
    # "dp" needs ranks 1 and 2; rank 1 has no dp collective: rank 2's stays unmatched.
    assert m.unmatched == 1


def test_wait_transfer_skew_and_last_rank():
    # Three members: [0, 10], [4, 10], [7, 10] (one instance). T = 3 (the last to arrive), waits 7, 3, 0,
    # skew 7, last the third; rank 1's clock runs 2 ahead (offset 2): its aligned start is 2, skew unchanged.
    start = np.array([0, 6, 7]); end = np.array([10, 12, 10])
    w = waits.compute(start, end, np.arange(3), np.array([0, 2, 0]), np.array([True, True, True]), np.array([0]))
    assert w.transfer.tolist() == [3] and w.wait.tolist() == [7, 3, 0]
    assert w.skew.tolist() == [7] and w.last.tolist() == [2]
    # A member whose clock is not aligned: no skew, no last rank; waits need no clock.
    w = waits.compute(start, end, np.arange(3), np.zeros(3, np.int64), np.array([True, False, True]), np.array([0]))
    assert w.skew.tolist() == [-1] and w.last.tolist() == [-1] and w.wait.tolist() == [7, 3, 0]


def test_waits_per_rank_are_wall_clock_time():
    # One rank, two collectives overlapping in time (two streams): [0, 10) with T = 4 waits [0, 6) and transfers
    # [6, 10); [2, 14) with T = 5 waits [2, 9) and transfers [9, 14). Transfers: [6, 14) = 8; wait: [0, 9) less
    # the transfers = [0, 6) = 6 (the sums would say 6 + 7 = 13 and 9). Exposed [5, 12): inside the wait, [5, 6).
    totals, steps = waits.per_rank(np.array([0, 0]), np.array([0, 2]), np.array([10, 14]), np.array([4, 5]), 1,
                                   [([3], np.array([0]), np.array([20]))], [(np.array([5]), np.array([12]))])
    assert (totals["wait_ns"].tolist(), totals["transfer_ns"].tolist(), totals["exposed_wait_ns"].tolist()) == \
        ([6], [8], [1])
    assert steps == {(0, 3): {"wait_ns": 6, "transfer_ns": 8, "exposed_wait_ns": 1}}
    assert totals["wait_ns"][0] + totals["transfer_ns"][0] <= 14        # the rank's communication time


# ------------------------------------------------------------------------- the straggler and its reason

def _result(rank):
    from tracelens.contract import RankResult, StepMetrics, Totals
    ms = 1_000_000
    steps = [StepMetrics(step=s, start_ns=0, end_ns=20 * ms, duration_ns=20 * ms, compute_ns=10 * ms,
                         comm_ns=0, overlap_ns=0, exposed_comm_ns=0, idle_ns=1 * ms, overlap_pct=None,
                         exposed_comm_fraction=None) for s in range(3)]
    totals = Totals(duration_ns=0, compute_ns=0, comm_ns=0, overlap_ns=0, exposed_comm_ns=0, idle_ns=0,
                    overlap_pct=None, exposed_comm_fraction=None)
    return RankResult(rank=rank, world_size=3, device=0, device_name=None, mode="gpu", source="", steps=steps,
                      totals=totals)


def _late(n, lead, late_by=800_000, share=None):
    """``n`` instances of three members (positions 0, 1, 2); position 2 is last in each, the others waited
    ``late_by``; ``lead``: the components of position 2's lead (ns per instance) beyond the others' 1 ms of
    compute each; two instances a step."""
    from tracelens.analyzers.run.crossrank import straggler
    from tracelens.analyzers.thresholds import Thresholds
    pos = np.tile([0, 1, 2], n)
    starts = np.arange(0, 3 * n, 3)
    cols = {c: np.zeros(3 * n, np.int64) for c in ("lead_ns", "lead_compute_ns", "lead_sync_ns", "lead_launch_ns",
                                                    "lead_host_ns")}
    cols["lead_ns"][:] = cols["lead_compute_ns"][:] = 1_000_000
    for k, v in lead.items():
        cols[k][2::3] += v
        cols["lead_ns"][2::3] += v
    wait = np.tile([late_by, late_by, 0], n)
    rows_late = starts + 2
    arrivals = straggler.Arrivals(pos=pos, wait=wait, lead=cols, starts=starts, members=np.full(n, 3),
                                  rows_late=rows_late, skew=np.full(n, late_by), caused=np.full(n, 2 * late_by),
                                  step=np.arange(n) // 2, delay=np.full(n, 900_000), first_start=[0, 0, 0])
    # The others' waits are all exposed (nothing computes beside them): per step, two instances' waits.
    exposed = {(p, s): 2 * late_by for p in (0, 1) for s in range((n + 1) // 2)}
    return straggler.find([_result(0), _result(1), _result(2)], arrivals, False, Thresholds(), exposed)


@pytest.mark.parametrize("component, reason", [
    ("lead_compute_ns", "compute"), ("lead_host_ns", "host-gap"), ("lead_sync_ns", "sync-stall"),
    ("lead_launch_ns", "late-launch")])
def test_the_reason_is_the_component_that_explains_the_lateness(component, reason):
    # Position 2 spends 0.8 ms more in one component before each of its 6 late arrivals: exactly how late it
    # came (the others waited 0.8 ms each), so that component names the reason.
    c = _late(6, {component: 800_000})
    assert (c.pos, c.reason, c.finding.verdict) == (2, reason, reason)
    ev = c.finding.evidence
    assert ev["lateness_ns"] == 800_000 and ev["excess_ns"]["lead"] == 800_000        # means per late collective
    # 6 instances x 2 x 0.8 ms of the others' wait = 9.6 ms; per other rank and step: 9.6 / 2 / 3 = 1.6 ms,
    # all of it exposed.
    assert ev["caused_wait_ns"] == 9_600_000 and ev["wait_per_step_ns"] == ev["impact_ns"] == 1_600_000


def test_a_lateness_the_lead_does_not_explain_is_unknown():
    # The same lateness, but before each late collective position 2 did what the others did, plus 0.1 ms of
    # host gap: 0.6 ms of excess lead for 4.8 ms of lateness.
    assert _late(6, {"lead_host_ns": 100_000}).reason == "unknown"
    # Two components of 0.4 ms: neither is half of the 0.8 ms excess... each is exactly half: the larger
    # (first in order on a tie) wins.
    assert _late(6, {"lead_host_ns": 300_000, "lead_compute_ns": 500_000}).reason == "compute"


def test_too_few_late_arrivals_name_no_straggler():
    # Last in all 4 instances, but fewer than straggler_min_late_count (5): could be chance.
    assert _late(4, {"lead_compute_ns": 800_000}) is None


def test_the_rank_waited_for_without_aligned_clocks_is_the_one_that_waited_least():
    from tracelens.analyzers.run.crossrank import straggler
    from tracelens.analyzers.thresholds import Thresholds
    # Two instances of three members; clocks not aligned (no last by start). The first: waits 30, 40, 0 µs:
    # the third came last. The second: waits 5, 0, 40 µs: the least waiting member is not alone in waiting
    # less than straggler_min_skew_ns (10 µs), so no one is named.
    wait = np.array([30_000, 40_000, 0, 5_000, 0, 40_000])
    got = straggler.late_rows(np.array([-1, -1]), np.array([-1, -1]), wait, np.array([0, 3]),
                              np.array([False, False]), Thresholds())
    assert got.tolist() == [2, -1]


def test_packed_keys_sort_as_lexsort():
    # Small ranges (packed into one int64) and a huge one (falls back to np.lexsort): same order and runs.
    rng = np.random.default_rng(7)
    small = [rng.integers(-3, 4, 500), rng.integers(0, 5, 500), rng.integers(0, 2, 500)]
    huge = [rng.integers(0, 1 << 62, 500)] + small
    for keys in (small, huge):
        order, starts = match._segments(*keys, by=2)
        assert order.tolist() == np.lexsort(keys).tolist()
        last_two = np.stack(keys[-2:])[:, order]
        change = np.flatnonzero(np.r_[True, (last_two[:, 1:] != last_two[:, :-1]).any(axis=0)])
        assert starts.tolist() == change.tolist()
    assert match._packed(huge) is None and match._packed(small) is not None


@pytest.mark.parametrize("seed", range(5))
def test_factorize_without_pandas_gives_pandas_codes(seed, monkeypatch):
    """combine factorizes names with a dict when pandas is not loaded (a warm report): the codes and the
    distinct values must be exactly pandas.factorize's, None and NaN included (-1)."""
    import sys

    import pandas as pd

    rng = np.random.default_rng(seed)
    pool = np.array(["allreduce", "broadcast", None, float("nan"), "", "all_to_all", "ç", "0"], dtype=object)
    values = pool[rng.integers(0, len(pool), 500)]
    want_codes, want_uniques = pd.factorize(values, use_na_sentinel=True)
    with_pd = match._factorize(values)
    monkeypatch.delitem(sys.modules, "pandas")
    without = match._factorize(values)
    assert without[0].tolist() == with_pd[0].tolist() == want_codes.tolist()
    assert without[1] == with_pd[1] == list(want_uniques)


@pytest.mark.parametrize("seed", range(4))
def test_waits_on_one_axis_equal_rank_by_rank(seed):
    # per_rank puts every rank's times on one axis; the rank-by-rank path (used for captures too long for
    # that) is the definition: random ranks of overlapping collectives, windows and exposed sets, each rank on
    # its own clock (offsets of up to a day), give the same totals and steps both ways.
    rng = np.random.default_rng(seed)
    n, rows = 5, 60
    pos = np.sort(rng.integers(0, n, rows))
    clock = rng.integers(0, 86_400 * 10**9, n)
    start = clock[pos] + rng.integers(0, 1_000_000, rows)
    end = start + rng.integers(1, 50_000, rows)
    transfer = (end - start) // rng.integers(1, 4, rows)
    windows, exposed = [], []
    for p in range(n):
        edges = np.sort(rng.choice(1_100_000, 6, replace=False)) + clock[p]
        windows.append(([2, 3, 4], edges[0::2], edges[1::2]))
        s = np.sort(rng.choice(1_100_000, 10, replace=False)) + clock[p]
        exposed.append((s[0::2], s[1::2]))
    got = waits.per_rank(pos, start, end, transfer, n, windows, exposed)
    want = waits._per_rank_each(pos, start, end, end - transfer, n, windows, exposed)
    assert {k: v.tolist() for k, v in got[0].items()} == {k: v.tolist() for k, v in want[0].items()}
    assert got[1] == want[1]
    # Ranks a block at a time (the path past _BLOCK_ROWS matched rows), blocks of 1 to 7 rows: a block holds
    # whole ranks, at least one, so some blocks are larger than asked. The rows out of rank order, as matching
    # leaves them (grouped by instance).
    shuffled = rng.permutation(rows)
    for block in (1, 7):
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(waits, "_BLOCK_ROWS", block)
            got = waits.per_rank(pos[shuffled], start[shuffled], end[shuffled], transfer[shuffled], n, windows,
                                 exposed)
        assert {k: v.tolist() for k, v in got[0].items()} == {k: v.tolist() for k, v in want[0].items()}
        assert got[1] == want[1]


@pytest.mark.parametrize("seed", range(4))
def test_group_medians_as_statistics_median(seed):
    import statistics
    from tracelens.analyzers.run.outliers import group_median
    rng = np.random.default_rng(seed)
    for counts in ([4] * 6, [1, 2, 3, 5, 8]):                # equal members (one partition), or not (sorted)
        group = np.repeat(np.arange(len(counts)), counts)
        values = rng.integers(0, 1000, len(group))
        want = [statistics.median(values[group == g].tolist()) for g in range(len(counts))]
        assert group_median(values, group, len(counts)).tolist() == want
        shuffled = rng.permutation(len(group))               # groups not in order (outliers' size buckets)
        assert group_median(values[shuffled], group[shuffled], len(counts)).tolist() == want


def test_inferred_steps_are_no_matching_key():
    # Rank 1's capture began one cycle later, so its inferred steps are numbered one lower for the same
    # collectives. Marked steps would key them apart (every step ambiguous: nothing matched); inferred ones
    # are matched by their order over the capture, all four.
    a = [dict(step=s, start_ns=100 * i, end_ns=100 * i + 10) for i, s in enumerate([1, 1, 2, 2])]
    b = [dict(step=s, start_ns=100 * i, end_ns=100 * i + 10) for i, s in enumerate([0, 0, 1, 1])]
    marked, _ = run(rank(a), rank(b))
    assert len(marked.starts) < 4
    inferred, pairs = run(rank(a, "inferred"), rank(b, "inferred"))
    assert len(inferred.starts) == 4
    assert pairs == [[(0, 100 * i), (1, 100 * i)] for i in range(4)]


def test_a_column_of_one_value_on_every_rank_stays_one_value():
    # Ranks from Inspector logs carry their constant columns as read-only views (analyzers/run/log_ranks.py);
    # the concatenation keeps such a column a view when every rank holds the same value, and copies it
    # (values intact) when they differ.
    a, b, c = (rank([dict(pg_name="0", seq=s, start_ns=100 * s) for s in range(3)]) for _ in range(3))
    for r, value in ((a, -1), (b, -1), (c, 4)):
        r.comm["launch_ns"] = np.broadcast_to(np.int64(value), (3,))
    same = match.concat([a, b]).cols["launch_ns"]
    assert same.strides == (0,) and same.tolist() == [-1] * 6
    mixed = match.concat([a, c]).cols["launch_ns"]
    assert mixed.strides == (8,) and mixed.tolist() == [-1] * 3 + [4] * 3
    m, pairs = run(a, b)
    assert len(m.starts) == 3 and m.unmatched == 0


def test_ranks_that_are_slices_of_one_table_are_that_table_not_a_copy():
    # log_ranks.py gives every rank a slice of one table in rank order; their concatenation is that table's
    # span itself. Slices out of order, with a gap, of another array or of another dtype are copied.
    table = np.arange(10, dtype=np.int64) * 7
    names = np.array(["a", "b"] * 5, dtype=object)

    def ranks(*spans):
        out = []
        for lo, hi in spans:
            r = rank([dict(seq=s) for s in range(hi - lo)])
            r.comm["start_ns"], r.comm["op"] = table[lo:hi], names[lo:hi]
            out.append(r)
        return out

    whole = match.concat(ranks((1, 4), (4, 4), (4, 9)))
    assert np.shares_memory(whole.cols["start_ns"], table) and whole.cols["start_ns"].tolist() == table[1:9].tolist()
    assert whole.names["op"] == ["b", "a"] and whole.cols["op"].tolist() == [0, 1] * 4
    for spans in (((4, 9), (1, 4)), ((1, 4), (5, 9))):
        copied = match.concat(ranks(*spans)).cols["start_ns"]
        assert not np.shares_memory(copied, table)
        assert copied.tolist() == [int(v) for lo, hi in spans for v in table[lo:hi]]
    other = ranks((0, 2), (2, 4))
    other[1].comm["start_ns"] = np.arange(10, dtype=np.int64)[2:4]
    assert match.concat(other).cols["start_ns"].tolist() == [0, 7, 2, 3]
    assert match._span([table[0:2], table.view(np.uint64)[2:4]]) is None
