"""The scale generator's Inspector logs (tests/fixtures/synth/inspector_scale.py) against its truth on small
runs: what bench/bench_inspector_scale.py checks at thousands of ranks is only the culprit and the slow link,
so the numbers the bench does not check are checked here, exactly (the generator's times are whole µs, what
the format keeps)."""

from __future__ import annotations

import dataclasses
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
# The slow link's time lost, by hand from the generator's truth (defaults pair_us=200, slow=4, world_us=800;
# PAIR_BYTES 16 MiB, WORLD_BYTES 64 MiB, both in the 16-256 MiB size bucket): each slow instance transfers for
# T = pair_us x slow = 800 µs, and lost = instances x T x (1 - busbw / the peers' median busbw). busbw is
# S / T x 2(n-1)/n (n members).
# - 2 ranks on 2 hosts: the world and pair 0 have the same two members (two hosts: peers). busbw share =
#   (16 MiB / 800 µs x 1) / (64 MiB / 800 µs x 1) = 1/4; 40 collectives, 20 of pair 0:
#   lost = 20 x 800 µs x 3/4 = 12 ms.
# - 20 ranks on 5 hosts of 4: pair 1 (hosts 2-4, 12 ranks) is the slow link, three hosts like the world's five
#   (its peers; pair 0 has two hosts, no peer of either). Share = (16 / 800 x 22/12) / (64 / 800 x 38/20) =
#   1/4 x 220/228 = 55/228; 60 collectives, 30 of pair 1: lost = 30 x 800 µs x 173/228 = 18.2105263 ms.
# - 64 ranks on 8 hosts of 8: pairs 0-3 of 16 ranks on two hosts each are peers (the world's 8 hosts: none);
#   pair 2 is slow, share 1/4 exactly; 30 collectives, 15 of pair 2: lost = 15 x 800 µs x 3/4 = 9 ms.
LOST_NS = {2: 12_000_000, 20: round(30 * 800_000 * 173 / 228), 64: 9_000_000}


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
    # The slow link is named by one finding: the truth's communicator, its hosts and members, and its time lost.
    (link,) = [d for d in rep.diagnoses if d.id == "slow-link"]
    ev = link.evidence
    members = run.members(run.slow_pair).tolist()
    assert (ev["comm"], ev["comm_name"]) == (want["slow_comm"], f"pair{run.slow_pair}")
    assert ev["ranks"] == members and link.rank == members[0]
    assert ev["hosts"] == sorted({f"node{run.host(r):05d}" for r in members})
    assert ev["instances"] == run.collectives // 2
    assert ev["busbw_gbps"] == pytest.approx(want["instances"][want["slow_comm"], 0]["busbw_gbps"], rel=1e-12)
    assert ev["lost_ns"] == LOST_NS[run.ranks] and ev["saving_ns"] is None
    assert f"the slow link: communicator {want['slow_comm']} (pair{run.slow_pair})" in rep.verdict.headline


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r.ranks}x{r.collectives}")
def test_without_timestamps_the_exec_times_give_the_same_truth(run, tmp_path):
    # The plugin's default output: no timestamps, each member's exec time (kernel_gpu). The waits, transfers,
    # last ranks, busbw, the culprit and the slow link's time lost are the truth's exactly, as with
    # timestamps; the clocks (seconds apart between hosts here) are unknown, not 0.
    scale.write(run, tmp_path, verbose=False)
    rep = api.report([str(tmp_path)], cache=False)
    want = scale.truth(run)
    cr = rep.cross_rank
    assert rep.inspector.exec_times and cr.matching.matched == len(want["instances"])
    assert [r.wait_ns for r in cr.ranks] == want["wait_ns"]
    assert [r.transfer_ns for r in cr.ranks] == want["transfer_ns"]
    assert [r.late_count for r in cr.ranks] == want["late_count"]
    assert all(r.clock_offset_ns is None for r in cr.ranks)
    for c in cr.collectives:
        t = want["instances"][c.pg, c.seq]
        assert (c.transfer_ns, c.wait_ns, c.last_rank) == (t["transfer_ns"], t["wait_ns"], t["last_rank"])
        assert c.busbw_gbps == pytest.approx(t["busbw_gbps"], rel=1e-12)
    assert [d.rank for d in rep.diagnoses if d.id == "straggler"] == [want["culprit"]]
    (link,) = [d for d in rep.diagnoses if d.id == "slow-link"]
    assert link.evidence["comm"] == want["slow_comm"] and link.evidence["lost_ns"] == LOST_NS[run.ranks]


@pytest.mark.parametrize("run", RUNS, ids=lambda r: f"{r.ranks}x{r.collectives}")
def test_no_slow_link_where_every_link_is_as_fast(run, tmp_path):
    scale.write(dataclasses.replace(run, slow=1), tmp_path)
    rep = api.report([str(tmp_path)], cache=False)
    assert [d for d in rep.diagnoses if d.id == "slow-link"] == []
    assert [d.rank for d in rep.diagnoses if d.id == "straggler"] == [run.late_rank]


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
