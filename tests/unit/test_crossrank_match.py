"""Matching collectives across ranks on hand-made collective tables (analyzers/run/crossrank/match.py),
and the wait/transfer split of hand-made instances."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from tracelens.analyzers.run.crossrank import match, waits
from tracelens.analyzers.seam import COMM_COLUMNS

MB = 1 << 20


def rank(rows: list[dict]):
    """A stand-in RankAnalysis holding only the collective table: defaults for what a row leaves out."""
    base = dict(step=0, op="all_reduce", dtype="Float", bytes=4 * MB, group_size=-1, pg_name=None, pg_desc=None,
                seq=-1, start_ns=0, end_ns=10, exposed_ns=0, stream=13, launch_ns=-1)
    full = [{**base, **r} for r in rows]
    comm = {c: np.array([r[c] for r in full], dtype=object if c in ("op", "dtype", "pg_name", "pg_desc") else
                        np.int64) for c in COMM_COLUMNS}
    return SimpleNamespace(comm=comm)


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
    w = waits.compute(start, end, np.array([10, 6, 1]), np.array([0, 2, 0]), np.array([True, True, True]),
                      np.array([0]))
    assert w.transfer.tolist() == [3] and w.wait.tolist() == [7, 3, 0]
    assert w.skew.tolist() == [7] and w.last.tolist() == [2]
    # Exposed time beyond T was waiting: max(0, exposed - 3).
    assert w.exposed_wait.tolist() == [7, 3, 0]
    # A member whose clock is not aligned: no skew, no last rank; waits need no clock.
    w = waits.compute(start, end, np.zeros(3, np.int64), np.zeros(3, np.int64), np.array([True, False, True]),
                      np.array([0]))
    assert w.skew.tolist() == [-1] and w.last.tolist() == [-1] and w.wait.tolist() == [7, 3, 0]


# ------------------------------------------------------------------------- the straggler's cause

def _result(rank, compute_ms, idle_ms):
    from tracelens.contract import RankResult, StepMetrics, Totals
    ms = 1_000_000
    steps = [StepMetrics(step=s, start_ns=0, end_ns=20 * ms, duration_ns=20 * ms, compute_ns=compute_ms * ms,
                         comm_ns=0, overlap_ns=0, exposed_comm_ns=0, idle_ns=idle_ms * ms, overlap_pct=None,
                         exposed_comm_fraction=None) for s in range(3)]
    totals = Totals(duration_ns=0, compute_ns=0, comm_ns=0, overlap_ns=0, exposed_comm_ns=0, idle_ns=0,
                    overlap_pct=None, exposed_comm_fraction=None)
    return RankResult(rank=rank, world_size=3, device=0, device_name=None, mode="gpu", source="", steps=steps,
                      totals=totals)


@pytest.mark.parametrize("compute, idle, delay, verdict", [
    (14, 1, 900_000, "late-compute"),     # 14 ms compute against 10 (> 10 % more)
    (10, 5, 900_000, "late-host"),        # idle 5 ms against 1: 4 ms > 10 % of the 20 ms step, material
    (10, 1, 20_000, "late-launch"),       # its late collectives started 20 µs after launch (< 50 µs)
    (10, 1, 900_000, "late"),             # nothing stands out
])
def test_the_straggler_cause(compute, idle, delay, verdict):
    from tracelens.analyzers.run.crossrank import straggler
    from tracelens.analyzers.thresholds import Thresholds
    results = [_result(0, 10, 1), _result(1, 10, 1), _result(2, compute, idle)]
    n = 6                                                   # rank 2 (position 2) last in all 6 instances
    f = straggler.find(results, np.full(n, 2), np.full(n, 500_000), np.full(n, 800_000), np.repeat([0, 1, 2], 2),
                       np.full(n, delay), np.full(n, 3), Thresholds())
    assert (f.rank, f.verdict) == (2, verdict)
    # 6 instances x 0.8 ms of the others' wait = 4.8 ms; per other rank and step: 4.8 / 2 / 3 = 0.8 ms.
    assert f.evidence["caused_wait_ns"] == 4_800_000 and f.evidence["impact_ns"] == 800_000
    assert f.evidence["caused_wait_by_step"] == [[0, 1_600_000], [1, 1_600_000], [2, 1_600_000]]


def test_too_few_late_arrivals_name_no_straggler():
    from tracelens.analyzers.run.crossrank import straggler
    from tracelens.analyzers.thresholds import Thresholds
    results = [_result(0, 10, 1), _result(1, 14, 1)]
    # Last in all 4 skewed instances, but fewer than straggler_min_late_count (5): could be chance.
    assert straggler.find(results, np.full(4, 1), np.full(4, 500_000), np.full(4, 1), np.zeros(4, np.int64),
                          np.full(4, -1), np.full(4, 2), Thresholds()) is None


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
