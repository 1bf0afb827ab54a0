"""Across ranks on generated and real multi-rank traces: matching, clocks, wait versus transfer, the
straggler and bus bandwidth, against the generator's truth (synth.cross_truth) and hand-checked corpus
numbers."""

from __future__ import annotations

from dataclasses import replace

import pytest

import tracelens
from tracelens.contract import Report

from conftest import SAMPLES, corpus_file
from fixtures import synth
from fixtures.findings import of


def _report(sc, tmp_path, ranks=None):
    synth.write(sc, tmp_path, ranks=ranks)
    return tracelens.analyze(tracelens.load(str(tmp_path)))


def _check_against_truth(rep, truth):
    cr = rep.cross_rank
    got = sorted(cr.collectives, key=lambda c: (c.pg, c.seq))
    assert len(got) == len(truth["instances"])
    for c, t in zip(got, sorted(truth["instances"], key=lambda t: (t["pg"], t["seq"]))):
        assert c.step == t["step"] and c.transfer_ns == t["transfer_ns"]
        assert c.wait_ns == sum(t["waits"].values())
        assert c.arrival_skew_ns == t["skew_ns"] and c.last_rank == t["last_rank"]
        assert c.busbw_gbps == pytest.approx(t["busbw_gbps"], rel=1e-12)
        # Member times on the aligned clock are the model's (written from BASE_NS on the reference rank's clock),
        # whatever clock each rank's trace was written on.
        assert c.starts_ns == [synth.BASE_NS + t["starts"][r] for r in c.ranks]
        assert c.ends_ns == [synth.BASE_NS + t["ends"][r] for r in c.ranks]
    for r in rep.ranks:
        steps = {s.step: (s.wait_ns, s.transfer_ns, s.exposed_wait_ns) for s in r.steps}
        assert steps == {k: (v["wait_ns"], v["transfer_ns"], v["exposed_wait_ns"])
                         for k, v in truth["steps"][r.rank].items()}
    for x in cr.ranks:
        assert x.wait_ns == sum(v["wait_ns"] for v in truth["steps"][x.rank].values())
        assert x.late_count == sum(t["last_rank"] == x.rank for t in truth["instances"])


def test_a_slow_link_among_subgroups(tmp_path):
    sc = synth.SLOW_LINK_RUN
    rep = _report(sc, tmp_path)
    cr = rep.cross_rank
    # 3 steps x (2 world all-reduces + 2 on each of the 3 subgroups), keyed by each group's Seq.
    assert (cr.matching.key, cr.matching.matched, cr.matching.unmatched) == ("pg-seq", 24, 0)
    _check_against_truth(rep, synth.cross_truth(sc))
    assert [w.code for w in rep.warnings] == []
    # busbw = S / T x 2(n-1)/n with T = 0.5 ms: subgroup 1 (4 ranks) S/T x 3/2, subgroup 2 (2 ranks) S/T x 1,
    # subgroup 3 (2 ranks, T = 2 ms) S/T x 1/4. Their layouts are all two hosts: peers, whatever their size. The
    # peers of subgroup 3 are 6 instances at 3/2 and 6 at 1: median 5/4, a share of 1/4 / 5/4 = 1/5. The
    # others' peers' medians (1/4 and 3/2: 7/8; 1/4 and 1: 5/8) are below theirs. The world's 8 ranks on 4
    # hosts have no peer.
    (d,) = of(rep, "slow-link")
    ev = d.evidence
    assert (ev["comm"], ev["comm_name"], ev["ranks"], ev["hosts"], ev["layout"]) == \
        ("3", "subgroup3", [5, 7], ["node2", "node3"], "two-hosts")
    assert (ev["instances"], ev["peer_comms"], ev["peer_instances"]) == (6, 2, 12)
    s_t = sc.bucket_bytes / (sc.buckets[0][1])
    assert ev["busbw_gbps"] == pytest.approx(s_t / 4, rel=1e-12)
    assert ev["peers_busbw_gbps"] == pytest.approx(s_t * 5 / 4, rel=1e-12)
    assert ev["share"] == pytest.approx(1 / 5, rel=1e-12)
    # lost = 6 instances x T (2 ms) x (1 - 1/5) = 9.6 ms
    assert ev["lost_ns"] == 9_600_000 and ev["transfer_ns"] == 12_000_000
    assert (d.rank, d.severity, ev["saving_ns"]) == (5, "warning", None)
    # As fast as the others: no slow link.
    even = _report(replace(sc, name="slow_link_even", slow_factor=1), tmp_path / "even")
    assert of(even, "slow-link") == []


def test_a_slow_link_from_inspector_logs_alone(tmp_path):
    from fixtures.synth.inspector import write_inspector

    sc = synth.SLOW_LINK_RUN
    write_inspector(sc, tmp_path)
    rep = tracelens.api.report([str(tmp_path)], cache=False)
    assert rep.cross_rank.matching.matched == 24
    (d,) = of(rep, "slow-link")
    ev = d.evidence
    # The same link, named by the logs' communicator id and comm_name; the model's times are whole µs, so the
    # time lost is the traces' to the ns.
    assert (ev["comm"], ev["comm_name"], ev["ranks"], ev["hosts"]) == \
        ("0x7f8c496ae9f603", "subgroup3", [5, 7], ["node2", "node3"])
    assert ev["share"] == pytest.approx(1 / 5, rel=1e-12) and ev["lost_ns"] == 9_600_000


def test_shared_clock_slow_rank(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    rep = _report(sc, tmp_path)
    cr = rep.cross_rank
    # 4 ranks x 3 steps x 4 buckets, every all-reduce keyed by its Seq (generator writes Seq and pg "0").
    assert (cr.matching.key, cr.matching.matched, cr.matching.unmatched) == ("pg-seq", 12, 0)
    assert cr.matching.missing_ranks == []
    _check_against_truth(rep, synth.cross_truth(sc))
    # One host: one clock, nothing estimated, no clock finding.
    assert [x.clock_offset_ns for x in cr.ranks] == [0, 0, 0, 0] and of(rep, "clock-offset") == []
    # Rank 2 computes 1.2x slower: it is last in all 12 all-reduces and the others wait for it.
    (d,) = of(rep, "straggler")
    assert d.rank == 2 and d.severity == "warning" and d.title.startswith("straggler (slower compute)")
    truth = synth.cross_truth(sc)
    assert d.evidence["late_count"] == 12
    assert d.evidence["caused_wait_ns"] == sum(sum(t["waits"].values()) for t in truth["instances"])
    # 25 MiB all-reduces of 1 ms among 4 ranks: one bandwidth row, 26.2144 GB/s x 2 x 3/4.
    (b,) = cr.bandwidth
    assert (b.op, b.group_size, b.count, b.latency_bound) == ("all_reduce", 4, 12, False)
    assert b.busbw_p50_gbps == pytest.approx(25 * 2**20 / 1e6 * 1.5)


def test_two_hosts_offset_is_estimated_per_host_and_corrected(tmp_path):
    sc = synth.SCENARIOS["xrank_two_hosts"]
    rep = _report(sc, tmp_path)
    cr = rep.cross_rank
    truth = synth.cross_truth(sc)
    # Generator: node1's clock runs 2_500_123 ns ahead; the estimate must be within 1 µs (it is exact here).
    for x in cr.ranks:
        assert abs(x.clock_offset_ns - truth["offsets"][x.rank]) <= 1_000 and x.clock_corrected
        assert x.host == sc.host(x.rank)
    # Skews and the last rank are on corrected clocks: they equal the generator's shared-clock truth.
    _check_against_truth(rep, truth)
    (c,) = of(rep, "clock-offset")
    assert c.severity == "info" and c.evidence["corrected_units"][0]["host"] == "node1"
    assert c.title == "clocks aligned: 1 clock offset corrected against rank 0"
    # Per-rank step metrics stay on each rank's own clock: rank 2's first step starts offset later.
    assert rep.ranks[2].steps[0].start_ns - rep.ranks[0].steps[0].start_ns == 2_500_123
    (d,) = of(rep, "straggler")
    assert d.rank == 3


def test_missing_ranks_match_among_those_present(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    rep = _report(sc, tmp_path, ranks=[0, 1, 3])      # the slow rank 2's trace is not given
    cr = rep.cross_rank
    assert (cr.matching.matched, cr.matching.unmatched, cr.matching.missing_ranks) == (12, 0, [2])
    # Without rank 2 the ranks present arrive together: T is their own duration, waits are zero.
    _check_against_truth(rep, synth.cross_truth(sc, ranks=[0, 1, 3]))
    assert of(rep, "straggler") == []


def test_mismatched_group_stops_matching(tmp_path):
    sc = synth.SCENARIOS["xrank_mismatch"]
    rep = _report(sc, tmp_path)
    cr = rep.cross_rank
    # Rank 1 records seq 5 (step 3, bucket 1) with twice the size: seq 0-4 match, the 7 later instances of
    # both ranks (14 rows) stay unmatched, with one warning.
    assert sc.seq_of(3, 1) == 5
    assert (cr.matching.matched, cr.matching.unmatched) == (5, 14)
    assert sorted(c.seq for c in cr.collectives) == [0, 1, 2, 3, 4]
    (w,) = [w for w in rep.warnings if w.code == "collective-mismatch"]
    assert w.count == 14 and "bytes" in w.message and "seq 5" in w.message


def test_offsets_per_rank_without_host_names(tmp_path):
    # legacy_wfbp: no host names, no process group (stream-order matching), rank 1's clock 37 µs ahead and
    # both ranks balanced (their all-reduces end together): the estimate is 37_000 ns, corrected.
    sc = synth.SCENARIOS["legacy_wfbp"]
    rep = _report(sc, tmp_path)
    cr = rep.cross_rank
    assert cr.matching.key == "stream-order" and cr.matching.matched == sc.steps * len(sc.buckets)
    assert [x.clock_offset_ns for x in cr.ranks] == [0, 37_000]
    assert [c.arrival_skew_ns for c in cr.collectives] == [0] * cr.matching.matched
    (c,) = of(rep, "clock-offset")
    assert c.evidence["corrected_units"][0]["ranks"] == [1]


def test_uncertain_offsets_are_not_applied(tmp_path):
    # The straggler scenario uncoupled (each rank's all-reduces last 1 ms whatever the others do) and rank 3
    # computing 1.3x slower, so its end times drift against rank 0's by more than 50 µs: its offset is not
    # applied and its collectives get no skew. Ranks 1 and 2 run rank 0's timing, with offsets 250_001 and
    # -99_999 ns (generator): estimated exactly.
    rep = _report(replace(synth.SCENARIOS["straggler"], coupled=False, hosts=[]), tmp_path)
    cr = rep.cross_rank
    got = {x.rank: (x.clock_offset_ns, x.clock_corrected) for x in cr.ranks}
    assert got[1] == (250_001, True) and got[2] == (-99_999, True) and got[3][1] is False
    assert all(c.arrival_skew_ns is None and c.last_rank is None for c in cr.collectives)
    (c,) = of(rep, "clock-offset")
    assert c.severity == "warning" and c.evidence["uncertain_units"][0]["ranks"] == [3]
    # No rank waits for another here (each rank's all-reduces end on their own), and step times are not
    # compared while collectives match: no straggler.
    assert of(rep, "straggler") == []


def test_the_straggler_sample_aligns_every_clock():
    # The bundled sample: blocking all-reduces end together, each rank on its own host with the generator's
    # clock offsets 0, 250_001, -99_999 and 1_000_003 ns; rank 3 (1.3x slower compute) arrives last at all 18.
    cr = tracelens.analyze(tracelens.load(str(SAMPLES / "straggler"))).cross_rank
    assert [(x.rank, x.host, x.clock_offset_ns, x.clock_corrected) for x in cr.ranks] == [
        (0, "node0", 0, True), (1, "node1", 250_001, True), (2, "node2", -99_999, True), (3, "node3", 1_000_003, True)]
    assert [x.late_count for x in cr.ranks] == [0, 0, 0, 18] and cr.matching.matched == 18


def test_single_rank_has_no_cross_rank(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    rep = _report(sc, tmp_path, ranks=[0])
    assert rep.cross_rank is None
    assert all(s.wait_ns is None for s in rep.ranks[0].steps)


def test_report_round_trips_with_cross_rank(tmp_path):
    rep = _report(synth.SCENARIOS["xrank_two_hosts"], tmp_path)
    again = Report.from_json(rep.to_json())
    assert again == rep and again.cross_rank.matching.matched == 12
    c = rep.collectives[0]
    assert (c.pg, c.seq, c.group_size, c.dtype) == ("0", 0, 4, "Float")


def test_corpus_sampled_pair():
    # corpus/hta/trace_filter: ranks 0 and 1 of a 128-rank job, sub-sampled events, no process group or seq
    # in the trace: stream-order matching. Per rank 10 collectives (hand-counted in the files). On the first
    # stream both ranks' step-551 order starts with an all-to-all of different dtype (rank 0: 3072 B of
    # long, rank 1: 339738624 B of unsigned char: sub-sampling dropped different ones), so that stream's
    # group stops at once: its 16 rows stay unmatched. The second stream holds one all_gather per step on
    # each rank: 2 matched. The other 126 ranks are missing.
    rep = tracelens.analyze(tracelens.load([str(corpus_file(f"hta/trace_filter/sampled_rank-{r}.json.gz"))
                                            for r in (0, 1)]))
    m = rep.cross_rank.matching
    assert (m.key, m.matched, m.unmatched) == ("stream-order", 2, 16)
    assert m.missing_ranks == list(range(2, 128))
    # Transfer of the step-551 all_gather: min(42.496, 42.744) ms (kernel durations in the files).
    first = min(rep.cross_rank.collectives, key=lambda c: c.step)
    assert first.transfer_ns == 42_496_000 and first.wait_ns == 248_000


def test_corpus_nsys_two_gpus():
    # nsys-ai mfu_2gpu_before: 2 processes on one host, 33 ncclDevKernel_SendRecv each (SQL on the export),
    # no process group: all 33 matched by stream order, none unmatched. Pairing the kernels in start order
    # per process in SQL gives sum(min duration) 5_777_111 ns, waits 11_395_541 (rank 0) and 2_451_989 ns.
    rep = tracelens.analyze(tracelens.load(str(corpus_file("nsys/nsys-ai/mfu_2gpu_before.sqlite"))))
    cr = rep.cross_rank
    assert (cr.matching.key, cr.matching.matched, cr.matching.unmatched) == ("stream-order", 33, 0)
    assert [(x.transfer_ns, x.wait_ns) for x in cr.ranks] == [(5_777_111, 11_395_541), (5_777_111, 2_451_989)]
    # One host ("modal"): one clock. The first pair: durations 99_808 and 122_431 ns, starts 26_775 ns apart.
    assert [x.clock_offset_ns for x in cr.ranks] == [0, 0]
    first = cr.collectives[0]
    assert (first.transfer_ns, first.arrival_skew_ns) == (99_808, 26_775)
    # Nothing hides it (0 overlap): all of the exposed communication is wait or transfer.
    for r in rep.ranks:
        (s,) = r.steps
        assert s.exposed_comm_ns == s.wait_ns + s.transfer_ns


def test_group_members_from_process_group_ranks(tmp_path):
    # A trace whose distributedInfo lists no pg_config, but whose collectives carry "Process Group Ranks"
    # as text (as every real trace writes it: corpus hta/nccl_parser_config has "[0, 1]"), here "[0, 2]".
    import gzip
    import json
    doc = synth.trace_dict(synth.SCENARIOS["xrank_shared"], 0)
    del doc["distributedInfo"]["pg_config"]
    for e in doc["traceEvents"]:
        if "Process Group Name" in e.get("args", {}):
            e["args"]["Process Group Ranks"] = "[0, 2]"
    path = tmp_path / "rank0.json.gz"
    path.write_bytes(gzip.compress(json.dumps(doc).encode()))
    (trace,) = tracelens.load(str(path))
    assert tracelens.analyze_rank(trace).groups == {"0": (0, 2)}


def _size_cells(rep) -> list[str]:
    """The size cell of every bus-bandwidth row, in the text and in the Markdown."""
    from tracelens.renderers import render

    text, md = render(rep, "text", color=False, width=200), render(rep, "markdown")
    ops = [b.op for b in rep.cross_rank.bandwidth]
    cells = []
    for out, sep in ((text, "│"), (md, "|")):
        head = out.index("us bandwidth")
        rows = [line for line in out[head:].splitlines() if line.strip(f"{sep} ").startswith(tuple(ops))]
        cells += [[c.strip() for c in line.split(sep) if c.strip()][2] for line in rows[:len(ops)]]
    return cells


def test_a_bandwidth_row_gives_the_sizes_its_collectives_had(tmp_path):
    # xrank_shared with its 4 buckets' all-reduces made 20, 30, 25 and 25 MiB (bucket_sizes): all in the
    # 16-256 MiB bucket, one row, whose sizes are 20-30 MiB, not the bucket's edges.
    sc = replace(synth.SCENARIOS["xrank_shared"], bucket_sizes=[20 << 20, 30 << 20, 25 << 20, 25 << 20])
    rep = _report(sc, tmp_path)
    (b,) = rep.cross_rank.bandwidth
    assert (b.min_bytes, b.max_bytes, b.count) == (16 << 20, 256 << 20, 12)     # 4 buckets x 3 steps
    assert (b.smallest_bytes, b.largest_bytes) == (20 << 20, 30 << 20)
    assert _size_cells(rep) == ["20.0 MiB–30.0 MiB"] * 2


def test_a_bandwidth_row_of_one_size_gives_that_size(tmp_path):
    # wfbp_sized: one 1 MiB bucket and three 32 MiB ones (bucket_sizes), in the 1-16 and 16-256 MiB buckets.
    rep = _report(synth.SCENARIOS["wfbp_sized"], tmp_path)
    assert [(b.smallest_bytes, b.largest_bytes) for b in rep.cross_rank.bandwidth] == [(1 << 20, 1 << 20),
                                                                                       (32 << 20, 32 << 20)]
    assert _size_cells(rep) == ["1.0 MiB", "32.0 MiB"] * 2
