"""The scale generator's Inspector logs (tests/fixtures/synth/inspector_scale.py) against its truth on small
runs: what bench/bench_inspector_scale.py checks at thousands of ranks is only the culprit and the slow link,
so the numbers the bench does not check are checked here, exactly (the generator's times are whole µs, what
the format keeps)."""

from __future__ import annotations

import statistics
from collections import defaultdict

import msgspec
import pytest

from fixtures.synth import inspector_scale as scale
from tracelens import api

RUNS = [
    # Two ranks on two hosts: the world and the one host pair are the same two ranks, two communicators.
    scale.ScaleRun(ranks=2, collectives=40, per_host=1, late_rank=1),
    # Five hosts of four: the odd last host joins the pair before it (a pair of 12 ranks beside one of 8); the
    # slow link is that pair, the late rank outside it.
    scale.ScaleRun(ranks=20, collectives=60, per_host=4, late_rank=2, slow_pair=1),
    scale.ScaleRun(ranks=64, collectives=30, per_host=8, late_rank=37, slow_pair=2, seed=3),
]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r.ranks}x{r.collectives}")
def test_the_logs_give_the_generators_truth(run, tmp_path):
    scale.write(run, tmp_path, gz=run.ranks == 20)
    rep = api.report([str(tmp_path)], cache=False)
    want = scale.truth(run)
    cr = rep.cross_rank
    assert rep.inspector.ranks == list(range(run.ranks)) and cr.matching.unmatched == 0
    assert cr.matching.matched == len(want["instances"])
    assert [r.wait_ns for r in cr.ranks] == want["wait_ns"]
    assert [r.transfer_ns for r in cr.ranks] == want["transfer_ns"]
    assert [r.late_count for r in cr.ranks] == want["late_count"]
    assert [r.clock_offset_ns for r in cr.ranks] == want["offsets"]
    for c in cr.collectives:
        t = want["instances"][c.pg, c.seq]
        assert (c.transfer_ns, c.wait_ns, c.last_rank) == (t["transfer_ns"], t["wait_ns"], t["last_rank"])
        # The report and the truth compute busbw by the same formula in float64; only the order of operations
        # may differ.
        assert c.busbw_gbps == pytest.approx(t["busbw_gbps"], rel=1e-12)
    # The late rank is named, by its finding and in the headline.
    assert [d.rank for d in rep.diagnoses if d.id == "straggler"] == [want["culprit"]]
    assert rep.verdict.headline.startswith(f"Rank {want['culprit']} is the one the others wait for")
    # The slow link is named by busbw per communicator: the lowest, and each communicator's the truth's (its
    # transfer is slow times the other pairs').
    per_comm = defaultdict(list)
    for c in cr.collectives:
        per_comm[c.pg].append(c.busbw_gbps)
    median = {pg: statistics.median(v) for pg, v in per_comm.items()}
    assert min(median, key=median.get) == want["slow_comm"]
    for pg, v in median.items():
        assert v == pytest.approx(want["instances"][pg, 0]["busbw_gbps"], rel=1e-12)


def test_past_the_bound_the_first_instances_keep_their_members_times(tmp_path, monkeypatch):
    # Past MEMBER_TIMES_ROWS members from logs alone, the Report keeps members' start and end times for the
    # first instances in order of start only, and says how many went without; every other number is the
    # same as with all of them. 20 ranks on five hosts of four: the world (20 members), then the two host
    # pairs at once (hosts 0-1: 8 members, hosts 2-4: 12), in turn. In order of start 20, 8, 12, 20, 12, 8,
    # 20, 8: a bound of 100 members keeps the first seven (exactly 100), not the eighth (108).
    from tracelens.analyzers.run import crossrank

    run = RUNS[1]
    scale.write(run, tmp_path)
    whole = api.report([str(tmp_path)], cache=False)
    monkeypatch.setattr(crossrank, "MEMBER_TIMES_ROWS", 100)
    bounded = api.report([str(tmp_path)], cache=False)
    kept = [c for c in bounded.cross_rank.collectives if c.starts_ns is not None]
    sizes = [len(c.ranks) for c in whole.cross_rank.collectives]
    want = next(k for k in range(len(sizes) + 1) if sum(sizes[:k + 1]) > 100)
    assert len(kept) == want == 7 and kept == bounded.cross_rank.collectives[:want]
    assert kept == whole.cross_rank.collectives[:want]
    for a, b in zip(bounded.cross_rank.collectives[want:], whole.cross_rank.collectives[want:]):
        assert a.starts_ns is None and a.ends_ns is None
        assert msgspec.structs.replace(a, starts_ns=b.starts_ns, ends_ns=b.ends_ns) == b
    (w,) = [w for w in bounded.warnings if w.code == "member-times-left-out"]
    assert w.count == len(sizes) - want and "member-times-left-out" not in {x.code for x in whole.warnings}
    assert bounded.cross_rank.ranks == whole.cross_rank.ranks and bounded.diagnoses == whole.diagnoses
    assert bounded.verdict == whole.verdict
