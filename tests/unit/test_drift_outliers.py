"""The robust statistics behind the drift and outlier findings, on sequences whose truth is built in."""

from __future__ import annotations

import numpy as np
import pytest

from tracelens.analyzers.run.trends import trend
from tracelens.analyzers.run.outliers import flag, size_bucket

MS = 1_000_000


def test_a_linear_growth_is_found_with_its_slope():
    rng = np.random.default_rng(1)
    y = 10 * MS + 20_000 * np.arange(200) + rng.normal(0, 0.3 * MS, 200)   # +20 µs per step, noise 0.3 ms
    t = trend(y)
    assert t.slope == pytest.approx(20_000, rel=0.1)                          # generator truth
    assert t.confidence > 0.999
    # first and last tenth: around steps 10 and 190 -> 10.2 ms and 13.8 ms (hand: 10 + 0.02 x step)
    assert t.first == pytest.approx(10.2 * MS, rel=0.03) and t.last == pytest.approx(13.8 * MS, rel=0.03)
    assert t.change == pytest.approx(3.6 / 12.0, rel=0.05)          # (13.8 - 10.2) / the median 12.0


def test_flat_noise_with_spikes_has_no_trend():
    rng = np.random.default_rng(2)
    y = 10 * MS + rng.normal(0, 0.5 * MS, 300)
    y[::25] += 40 * MS                                 # a spike every 25 steps: outliers, not a drift
    t = trend(y)
    assert abs(t.slope) < 2_000 and t.confidence < 0.99
    assert abs(t.change) < 0.05


def test_a_falling_quantity_has_a_negative_change():
    y = np.linspace(8 * MS, 4 * MS, 50)
    t = trend(y)
    assert t.slope < 0 and t.confidence > 0.999 and t.change < -0.5


def test_many_steps_use_an_even_sample_of_pairs():
    y = np.arange(5000, dtype=np.float64) * 3.0        # exact slope 3
    assert trend(y).slope == pytest.approx(3.0)


def test_too_few_steps_give_no_trend():
    assert trend([1, 2, 3]) is None


def test_size_buckets_are_powers_of_two():
    assert size_bucket(np.array([1, 2, 3, 4, 1 << 20, (1 << 21) - 1, 0, -1])).tolist() == [0, 1, 1, 2, 20, 20, -1, -1]


def test_injected_slow_instances_are_flagged_and_nothing_else():
    rng = np.random.default_rng(3)
    d = (4 * MS + rng.normal(0, 0.05 * MS, 400)).astype(np.int64)
    group = np.repeat([0, 1], 200)
    d[group == 1] //= 4                                # a second kind, 1 ms long
    d[[17, 250]] = [40 * MS, 9 * MS]                   # injected: 10x and 9x their group's median
    f = flag(d, group, k=5, floor_ns=MS // 2, min_group=8)
    assert np.flatnonzero(f.outlier).tolist() == [17, 250]
    assert f.median_ns[17] == pytest.approx(4 * MS, rel=0.01)


def test_the_floor_keeps_microsecond_jitter_quiet():
    d = np.array([10_000] * 50 + [30_000], dtype=np.int64)    # 10 µs kind, one at 30 µs: 20 µs over
    assert not flag(d, np.zeros(51, np.int64), k=5, floor_ns=MS // 2, min_group=8).outlier.any()


def test_a_small_group_flags_nothing():
    d = np.array([MS, MS, 40 * MS], dtype=np.int64)
    assert not flag(d, np.zeros(3, np.int64), k=5, floor_ns=MS // 2, min_group=8).outlier.any()


def test_a_long_ranks_findings_name_their_steps_in_short():
    # Renderers: a finding over scattered steps of a rank past 50 steps names runs, past six runs a count.
    from tracelens.renderers.common import steps_label

    assert steps_label([2, 5, 7]) == "steps 2, 5, 7"                           # a short rank: every step
    assert steps_label([2, 5, 7], of=60) == "steps 2, 5, 7"                    # single steps are runs of one
    runs = list(range(2, 38)) + list(range(145, 181)) + [288]
    assert steps_label(runs, of=1000) == "steps 2–37, 145–180, 288"
    assert steps_label(runs, of=50) == "steps " + ", ".join(map(str, runs))   # 50 steps: as before
    blocks = [s for k in range(8) for s in range(2 + 143 * k, 38 + 143 * k)]   # 8 runs of 36 steps
    assert steps_label(blocks, of=1000) == ("288 of 1000 steps (2–37, 145–180, 288–323, 431–466, 574–609, …, "
                                            "1003–1038)")
