"""Finding NCCL Inspector logs among the inputs (parsers.discover) and reading them for combine (nccl.inputs)."""

from __future__ import annotations

import json

from fixtures import synth
from fixtures.synth.inspector import write_inspector
from tracelens.parsers import discover, nccl

SC = synth.SCENARIOS["xrank_shared"]


def test_a_dump_folder_beside_traces(tmp_path):
    traces = synth.write(SC, tmp_path)
    logs = write_inspector(SC, tmp_path)
    stray = logs[0].parent / "notes.log"
    stray.write_text("copied by hand\n")
    debug = tmp_path / "nccl-debug.log"
    debug.write_text("node0:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n")
    files = discover([str(tmp_path)])
    assert sorted(files) == sorted(traces)
    assert sorted(files.inspector_logs) == sorted(logs)
    # The debug log stays a debug log; a file of the dump folder that is not Inspector output is skipped.
    assert files.nccl_logs == [debug]
    assert (stray, "not NCCL Inspector output") in files.logs_skipped


# What the plugin writes with NCCL_INSPECTOR_PROM_DUMP=1 (inspector_prom.cc: nccl_inspector_metrics_<uuid>.prom,
# its metric names and labels): the latest value per collective, nothing to match.
PROM = ('nccl_bus_bandwidth_gbs{comm_id="0xd152c00f111816",collective="AllReduce",hostname="pool0-0002",rank="4",'
        'n_ranks="8",n_nodes="1",coll_sn="228924",coll_timing_source="kernel_gpu",message_size="2.00GB"} 485.1\n'
        'nccl_collective_exec_time_microseconds{comm_id="0xd152c00f111816",collective="AllReduce",rank="4"} 61974\n')


def test_a_prometheus_snapshot_is_skipped_with_what_it_is(tmp_path, capsys):
    from tracelens.cli import main

    dump = tmp_path / "nccl_inspector"
    dump.mkdir()
    prom = dump / "nccl_inspector_metrics_GPU-6f1c.prom"
    prom.write_text(PROM)
    logs = write_inspector(SC, tmp_path)
    files = discover([str(tmp_path)])
    assert sorted(files.inspector_logs) == sorted(logs)
    (why,) = [w for f, w in files.logs_skipped if f == prom]
    assert why.startswith("an NCCL Inspector Prometheus snapshot (NCCL_INSPECTOR_PROM_DUMP=1)")
    # Alone, named or as its folder: a usage error saying what the file is and what writes the records.
    for arg in (prom, dump):
        assert main(["report", str(arg), "--no-cache"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Prometheus snapshot" in err and "NCCL_INSPECTOR_PROM_DUMP=0" in err
    # Other .prom files (a node exporter's own) are not it.
    other = dump / "node.prom"
    other.write_text("node_load1 0.5\n")
    assert all(f != other for f, _ in discover([str(tmp_path)]).logs_skipped)


def test_inspector_logs_alone_named_or_by_glob(tmp_path):
    (log,) = write_inspector(SC, tmp_path, gz=True, one_file=True)
    moved = tmp_path / "gathered.log.gz"
    log.rename(moved)
    for args in ([str(moved)], [str(tmp_path / "*.gz")], [str(tmp_path)]):
        files = discover(args)
        assert list(files) == [] and files.inspector_logs == [moved], args


def test_notes_on_what_could_not_be_read(tmp_path):
    (log,) = write_inspector(SC, tmp_path, ranks=[0], version="v4.0")
    lines = log.read_text().splitlines()
    newer = json.loads(lines[1])
    newer["metadata"]["inspector_output_format_version"] = "v4.7"
    newer["coll_perf"]["coll_future_field"] = 3
    lines[1] = json.dumps(newer)
    lines[2] = lines[2][:40]                        # one line cut in the middle
    log.write_text("\n".join(lines) + "\n")
    (empty,) = write_inspector(SC, tmp_path / "other", ranks=[1])
    empty.write_text("")
    got = nccl.inputs([], [], inspector=[log, empty])
    assert [x.path for x in got.inspector] == [str(log)]
    codes = {code: (n, msg) for code, n, msg in got.notes}
    # One line of each kind of trouble, as made above.
    assert codes["inspector-not-json"][0] == 1
    assert codes["inspector-unknown-version"][0] == 1 and "v4.7" in codes["inspector-unknown-version"][1]
    assert codes["inspector-unknown-fields"][0] == 1 and "coll_future_field" in codes["inspector-unknown-fields"][1]
    assert codes["nccl-log-skipped"][0] == 1
    # The other records are whole: every all-reduce of rank 0 but the cut one.
    assert got.inspector[0].records == SC.steps * len(SC.buckets) - 1


# ------------------------------------------------------------------ across ranks from the logs alone

import dataclasses  # noqa: E402
import statistics  # noqa: E402

import pytest  # noqa: E402

from tracelens import api  # noqa: E402

# The Inspector format writes integer µs and the writer floors each kernel end to one: a per-instance wait or
# transfer differs from the model's by less than 1 µs per end, so 2 µs.
US_FLOOR = 2_000
# Two ranks on two hosts whose clocks differ by 2.5 ms (xrank_two_hosts with its ranks 0 and 3), rank 1 slower.
TWO = dataclasses.replace(synth.SCENARIOS["xrank_two_hosts"], name="two_hosts_2", ranks=2, hosts=["node0", "node1"],
                          clock_offsets_ns=[0, 2_500_123], rank_slowdown=[1.0, 1.25])
# One slow link: the sixth step's third all-reduce (step index 5, bucket 2) takes 4 ms longer on every rank
# (OUTLIER_RUN: 1 ms each otherwise).
SLOW_LINK = dataclasses.replace(synth.OUTLIER_RUN, name="slow_link", slow_transfer={(5, 2): 4 * synth.MS})


def _both(sc, tmp_path, **kw):
    write_inspector(sc, tmp_path / "logs", **kw)
    synth.write(sc, tmp_path / "traces")
    return (api.report([str(tmp_path / "logs")], cache=False), api.report([str(tmp_path / "traces")], cache=False))


@pytest.mark.parametrize("sc", [TWO, synth.SCENARIOS["culprit_host_gap"], SLOW_LINK], ids=lambda s: s.name)
def test_logs_alone_give_the_traces_waits_and_the_truth(sc, tmp_path):
    logs, traces = _both(sc, tmp_path)
    truth = synth.cross_truth(sc)
    assert logs.ranks == [] and logs.inspector.ranks == list(range(sc.ranks))
    assert logs.inspector.overlap_pct is None and logs.inspector.exposed_comm_ns is None
    assert logs.cross_rank.matching.matched == traces.cross_rank.matching.matched == len(truth["instances"])
    assert logs.cross_rank.matching.key == "pg-seq" and logs.cross_rank.matching.unmatched == 0
    n = len(truth["instances"])
    for a, b in zip(logs.cross_rank.ranks, traces.cross_rank.ranks):
        assert (a.rank, a.late_count, a.matched) == (b.rank, b.late_count, b.matched)
        assert abs(a.wait_ns - b.wait_ns) <= US_FLOOR * n and abs(a.transfer_ns - b.transfer_ns) <= US_FLOOR * n
        assert a.exposed_wait_ns is None and b.exposed_wait_ns is not None     # unknown from logs, never 0
    # Per instance, in the order both give them (their first start): the model's transfer, waits, last rank
    # and busbw (nccl-tests all-reduce over the transfer time).
    by_key = sorted(truth["instances"], key=lambda i: (i["step"], i["bucket"]))
    for got, want in zip(logs.cross_rank.collectives, by_key):
        assert abs(got.transfer_ns - want["transfer_ns"]) <= US_FLOOR
        assert abs(got.wait_ns - sum(want["waits"].values())) <= US_FLOOR * sc.ranks
        assert got.last_rank == want["last_rank"]
        assert got.busbw_gbps == pytest.approx(want["busbw_gbps"], rel=US_FLOOR / want["transfer_ns"])
    # The clock of rank 1's host, aligned from matched end times: its offset to the µs the format keeps.
    for a in logs.cross_rank.ranks:
        assert abs(a.clock_offset_ns - truth["offsets"][a.rank]) < 1_000


def test_the_rank_the_others_wait_for(tmp_path):
    sc = synth.SCENARIOS["culprit_host_gap"]
    logs, traces = _both(sc, tmp_path)
    want = synth.verdict_truth(sc)["culprit"]
    late = [d for d in logs.diagnoses if d.id == "straggler"]
    assert [d.rank for d in late] == [want] == [d.rank for d in traces.diagnoses if d.id == "straggler"]
    caused = late[0].evidence["caused_wait_ns"]
    twin = next(d for d in traces.diagnoses if d.id == "straggler").evidence["caused_wait_ns"]
    assert abs(caused - twin) <= US_FLOOR * (sc.ranks - 1) * sc.steps * len(sc.buckets)
    assert f"Rank {want} is the one the others wait for" in logs.verdict.headline
    assert "unknown without traces" in logs.verdict.headline and logs.verdict.causes == []


def test_a_slow_link_is_an_outlier_of_its_transfer(tmp_path):
    logs, traces = _both(SLOW_LINK, tmp_path)
    (a,) = [d for d in logs.diagnoses if d.id == "outlier"]
    (b,) = [d for d in traces.diagnoses if d.id == "outlier"]
    assert a.evidence["worst"]["cause"] == b.evidence["worst"]["cause"] == "transfer"
    assert a.evidence["outliers"] == b.evidence["outliers"] == 1
    # Exposure needs compute: unknown from the logs, measured from the traces.
    assert a.evidence["exposed_excess_ns"] is None and b.evidence["exposed_excess_ns"] is not None


def test_hostile_runs(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    paths = write_inspector(sc, tmp_path)
    # Rank 0 alone in a second communicator of two ranks: counted, and nothing else changes.
    lone = json.loads(paths[0].read_text().splitlines()[0])
    lone["header"].update(id="0xdead", n_ranks=2)
    with open(paths[0], "a") as fh:
        fh.write(json.dumps(lone) + "\n")
    r = api.report([str(tmp_path)], cache=False)
    warned = {w.code: w.count for w in r.warnings}
    assert warned["inspector-lone-communicator"] == 1
    assert r.cross_rank.matching.matched == sc.steps * len(sc.buckets) and r.cross_rank.matching.unmatched == 1


@pytest.mark.parametrize("sc", [TWO, synth.SCENARIOS["culprit_host_gap"], SLOW_LINK], ids=lambda s: s.name)
def test_logs_without_kernel_timestamps_give_the_waits_from_exec_times(sc, tmp_path):
    # The plugin's default output (not verbose): no timestamps, each member's exec time (kernel_gpu timing).
    # A blocking collective ends together on its members, so the last to arrive runs shortest: the transfer,
    # the waits and the last rank are the model's (to the µs the format keeps), whatever the clocks (TWO's
    # differ by 2.5 ms), as with timestamps and as from the traces.
    logs, traces = _both(sc, tmp_path, verbose=False)
    truth = synth.cross_truth(sc)
    n = len(truth["instances"])
    records = sc.ranks * n                       # every rank is in every instance (one communicator)
    warned = {w.code: w.count for w in logs.warnings}
    assert warned["inspector-no-timestamps"] == warned["inspector-exec-times"] == records
    assert logs.inspector.exec_times and logs.inspector.timed == logs.inspector.records == records
    assert logs.cross_rank.matching.matched == n and logs.cross_rank.matching.unmatched == 0
    for a, b in zip(logs.cross_rank.ranks, traces.cross_rank.ranks):
        assert (a.rank, a.late_count, a.matched) == (b.rank, b.late_count, b.matched)
        assert abs(a.wait_ns - b.wait_ns) <= US_FLOOR * n and abs(a.transfer_ns - b.transfer_ns) <= US_FLOOR * n
        # No clock: its offset is unknown, never 0.
        assert a.clock_offset_ns is None and a.clock_spread_ns is None and not a.clock_corrected
    by_key = sorted(truth["instances"], key=lambda i: (i["step"], i["bucket"]))
    for got, want in zip(logs.cross_rank.collectives, by_key):
        assert abs(got.transfer_ns - want["transfer_ns"]) <= US_FLOOR
        assert abs(got.wait_ns - sum(want["waits"].values())) <= US_FLOOR * sc.ranks
        assert got.last_rank == want["last_rank"]
        assert got.starts_ns is None and got.ends_ns is None          # no member time is a clock's
    assert [d.rank for d in logs.diagnoses if d.id == "straggler"] == \
        [d.rank for d in traces.diagnoses if d.id == "straggler"]
    assert not [d for d in logs.diagnoses if d.id == "clock-offset"]
    assert all(s is None for k in logs.outliers for s in k.start_ns)


def test_exec_times_with_counts_in_the_quadrillions_match_alike(tmp_path):
    # coll_sn counts from the communicator's creation: 2^50 added to every one (on every rank alike) leaves no
    # room for one place per count in an int64 of ns (2^50 x the ~3.5 ms longest exec time > 2^62), and the
    # distinct (communicator, coll_sn) keys are used instead: the same numbers.
    sc = synth.SCENARIOS["culprit_host_gap"]
    write_inspector(sc, tmp_path / "plain", verbose=False)
    write_inspector(sc, tmp_path / "far", verbose=False, sn_offset=1 << 50)
    plain, far = (api.report([str(tmp_path / name)], cache=False) for name in ("plain", "far"))
    assert far.cross_rank.matching.matched == plain.cross_rank.matching.matched == sc.steps * len(sc.buckets)
    assert [(c.wait_ns, c.transfer_ns, c.last_rank) for c in far.cross_rank.collectives] == \
        [(c.wait_ns, c.transfer_ns, c.last_rank) for c in plain.cross_rank.collectives]
    assert [c.seq for c in far.cross_rank.collectives] == [c.seq + (1 << 50) for c in plain.cross_rank.collectives]


def test_exec_times_taken_on_the_cpu_are_left_out(tmp_path):
    # A time taken on the CPU counts the queue before the kernel too: longest on a rank whose GPU is behind,
    # it would name the wrong rank. Rank 5's records so timed are left out (and counted); the others match.
    sc = synth.SCENARIOS["culprit_host_gap"]
    paths = write_inspector(sc, tmp_path, verbose=False)
    n = sc.steps * len(sc.buckets)
    paths[5].write_text(paths[5].read_text().replace('"kernel_gpu"', '"collective_cpu"'))
    r = api.report([str(tmp_path)], cache=False)
    (w,) = [w for w in r.warnings if w.code == "inspector-exec-times"]
    assert w.count == (sc.ranks - 1) * n
    assert f"{n:,} records timed on the CPU or naming no timing source left out" in w.message
    assert r.cross_rank.matching.matched == n
    assert all(5 not in c.ranks for c in r.cross_rank.collectives)


def test_logs_with_some_timestamps_match_only_those(tmp_path):
    # One rank's log verbose, the others not: the timestamps are used where there are any, and the exec times
    # of the others are not mixed with them (made times are on no clock). Nothing matches: one rank alone.
    sc = synth.SCENARIOS["xrank_shared"]
    write_inspector(sc, tmp_path, verbose=False, ranks=range(1, sc.ranks))
    write_inspector(sc, tmp_path, ranks=[0])
    r = api.report([str(tmp_path)], cache=False)
    assert not r.inspector.exec_times and r.inspector.timed == sc.steps * len(sc.buckets)
    assert r.cross_rank is None or r.cross_rank.matching.matched == 0
    assert "inspector-exec-times" not in {w.code for w in r.warnings}
    assert r.verdict.headline.startswith("No collective was matched across ranks")


# ------------------------------------------------------------------ logs of every rank, traces of some

CULPRIT = synth.SCENARIOS["culprit_host_gap"]


def _mixed(sc, tmp_path, traced, **kw):
    """The report of a folder holding every rank's Inspector log and the traces of ``traced``, and the report of
    every rank's traces."""
    write_inspector(sc, tmp_path / "run", **kw)
    synth.write(sc, tmp_path / "run", ranks=traced)
    synth.write(sc, tmp_path / "all")
    return api.report([str(tmp_path / "run")], cache=False), api.report([str(tmp_path / "all")], cache=False)


def _rest_per_step(r, rank) -> float:
    steps = next(x for x in r.ranks if x.rank == rank).steps
    return sum(s.exposed_comm_ns - s.exposed_wait_ns for s in steps) / len(steps)


# Ranks 0-3 traced: the late rank (5, synth's culprit) is among the four without a trace; ranks 2-5: it has one.
@pytest.mark.parametrize("traced", [[0, 1, 2, 3], [2, 3, 4, 5]], ids=["late-rank-untraced", "late-rank-traced"])
def test_logs_of_every_rank_beside_traces_of_some(traced, tmp_path):
    sc = CULPRIT
    mixed, full = _mixed(sc, tmp_path, traced)
    truth, want = synth.cross_truth(sc), synth.verdict_truth(sc)
    logged = [r for r in range(sc.ranks) if r not in traced]
    # Which ranks came from where.
    assert [r.rank for r in mixed.ranks] == traced
    assert (mixed.inspector.traced, mixed.inspector.ranks) == (traced, logged)
    (pair,) = mixed.inspector.paired
    # The writer numbers coll_sn as the traces' Seq (sn_offset 0), and the traced ranks' 12 all-reduces each
    # (3 steps of 4 buckets) all line up.
    assert (pair.pg, pair.comm, pair.sn_offset) == ("0", "0x7f8c496ae9f661", 0)
    assert pair.agreed == pair.of == len(traced) * sc.steps * len(sc.buckets)
    assert not [w for w in mixed.warnings if w.code.startswith("inspector")]
    # Every rank in every instance, as with every trace; per instance the generator's waits, last rank and busbw.
    n = len(truth["instances"])
    assert mixed.cross_rank.matching.matched == full.cross_rank.matching.matched == n
    assert mixed.cross_rank.matching.unmatched == 0 and mixed.cross_rank.matching.missing_ranks == []
    by_key = sorted(truth["instances"], key=lambda i: (i["step"], i["bucket"]))
    for got, inst in zip(mixed.cross_rank.collectives, by_key):
        assert got.ranks == list(range(sc.ranks)) and got.last_rank == inst["last_rank"]
        assert abs(got.transfer_ns - inst["transfer_ns"]) <= US_FLOOR
        assert abs(got.wait_ns - sum(inst["waits"].values())) <= US_FLOOR * sc.ranks
        assert got.busbw_gbps == pytest.approx(inst["busbw_gbps"], rel=US_FLOOR / inst["transfer_ns"])
    for a, b in zip(mixed.cross_rank.ranks, full.cross_rank.ranks):
        assert (a.rank, a.late_count, a.matched) == (b.rank, b.late_count, b.matched)
        assert abs(a.wait_ns - sum(i["waits"][a.rank] for i in truth["instances"])) <= US_FLOOR * n
        assert abs(a.wait_ns - b.wait_ns) <= US_FLOOR * n and abs(a.transfer_ns - b.transfer_ns) <= US_FLOOR * n
        # What of the wait was exposed needs compute: the traced ranks' own, unknown for the others.
        assert a.exposed_wait_ns == (b.exposed_wait_ns if a.rank in traced else None)
    assert [(b.op, b.count) for b in mixed.cross_rank.bandwidth] == [(b.op, b.count) for b in full.cross_rank.bandwidth]
    for a, b in zip(mixed.cross_rank.bandwidth, full.cross_rank.bandwidth):
        assert a.busbw_p50_gbps == pytest.approx(b.busbw_p50_gbps, rel=1e-3)
    # The culprit from every rank's arrivals; its reason only where it has a trace.
    (late,) = [d for d in mixed.diagnoses if d.id == "straggler"]
    twin = next(d for d in full.diagnoses if d.id == "straggler")
    assert late.rank == twin.rank == want["culprit"]
    assert abs(late.evidence["caused_wait_ns"] - twin.evidence["caused_wait_ns"]) <= US_FLOOR * (sc.ranks - 1) * n
    wait = next(c for c in mixed.verdict.causes if c.cause == "peer-wait")
    if want["culprit"] in traced:
        assert (wait.culprit.rank, wait.culprit.reason) == (want["culprit"], want["reason"])
        assert late.evidence["lead_by_reason_ns"] == twin.evidence["lead_by_reason_ns"]
        assert wait.saving_ns == next(c for c in full.verdict.causes if c.cause == "peer-wait").saving_ns
    else:
        assert (wait.culprit.rank, wait.culprit.reason) == (want["culprit"], "unknown")
        assert late.evidence["from_logs"] and wait.saving_ns is None and "has no trace" in wait.saving_note
        assert f"profile rank {want['culprit']}" in late.advice
    # Overlap and the not-overlapped cause from the traced ranks alone, each rank's steps as with every trace.
    for r in mixed.ranks:
        assert r.steps == next(x for x in full.ranks if x.rank == r.rank).steps
    assert mixed.summary.ranks == len(traced)
    alone = api.report([str(p) for p in sorted((tmp_path / "run").glob("rank*.json.gz"))], cache=False)
    assert mixed.summary.overlap_pct == alone.summary.overlap_pct
    rest = next(c for c in mixed.verdict.causes if c.cause == "not-overlapped")
    assert rest.ns_per_step == round(statistics.median(_rest_per_step(full, r) for r in traced))


def test_every_output_says_which_ranks_came_from_where(tmp_path):
    from tracelens.renderers import render

    mixed, _ = _mixed(CULPRIT, tmp_path, [0, 1, 2, 3])
    doc = json.loads(render(mixed, "json"))
    assert (doc["inspector"]["traced"], doc["inspector"]["ranks"]) == ([0, 1, 2, 3], [4, 5, 6, 7])
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    said = "ranks 0–3 from traces (steps, overlap, exposure), ranks 4–7 from NCCL Inspector logs"
    assert said in render(mixed, "markdown")
    assert said in " ".join(render(mixed, "text", color=False, width=200).split())
    # A report of traces alone says nothing of sources.
    alone = api.report([str(p) for p in sorted((tmp_path / "run").glob("rank*.json.gz"))], cache=False)
    assert "from traces" not in render(alone, "markdown")


def test_the_offset_between_coll_sn_and_seq_is_learned(tmp_path):
    # NCCL counted 17 collectives on the communicator before torch's Seq began (warm-up, another group's init).
    mixed, full = _mixed(CULPRIT, tmp_path, [0, 1, 2, 3], sn_offset=17)
    assert [p.sn_offset for p in mixed.inspector.paired] == [17]
    assert mixed.cross_rank.matching.matched == full.cross_rank.matching.matched
    assert [a.late_count for a in mixed.cross_rank.ranks] == [a.late_count for a in full.cross_rank.ranks]


@pytest.mark.parametrize("shift", [0, 7_000_000_000], ids=["one-clock", "clocks-7s-apart"])
def test_alike_steps_are_paired_by_the_clock_or_not_at_all(shift, tmp_path):
    # The logs hold 5 steps, the traces capture the first 3 (the same timeline: the timing model draws each step
    # alike). Every step of culprit_host_gap is alike, so coll_sn = Seq + 0, + 4 and + 8 (steps of 4 buckets)
    # line up the same op, size and kernel time; one clock settles it, logs 7 s from the traces' leave it open.
    sc = CULPRIT
    write_inspector(dataclasses.replace(sc, steps=5), tmp_path, clock_shift_ns=shift)
    synth.write(sc, tmp_path, ranks=[0, 1, 2, 3])
    mixed = api.report([str(tmp_path)], cache=False)
    alone = api.report([str(p) for p in sorted(tmp_path.glob("rank*.json.gz"))], cache=False)
    warned = {w.code: w.count for w in mixed.warnings}
    if shift == 0:
        assert [p.sn_offset for p in mixed.inspector.paired] == [0]
        # The steps the traces did not capture are left out, not counted as unmatched.
        assert mixed.cross_rank.matching.matched == sc.steps * len(sc.buckets)
        assert mixed.cross_rank.matching.unmatched == 0
        return
    assert warned["inspector-unpaired"] == 1 and warned["inspector-beside-traces"] == sc.ranks
    assert "fit equally" in next(w.message for w in mixed.warnings if w.code == "inspector-unpaired")
    assert mixed.inspector is None and mixed.cross_rank.ranks == alone.cross_rank.ranks


def test_steps_unlike_each_other_pair_on_another_clock(tmp_path):
    # long_capture's all-reduces grow 20 us a step: only the right offset lines up their kernel times, whatever
    # the clock. Rank 1 has no trace; its log clock, 7 s off, is moved onto rank 0's trace clock (one host).
    sc = synth.SCENARIOS["long_capture"]
    mixed, full = _mixed(sc, tmp_path, [0], clock_shift_ns=7_000_000_000, sn_offset=3)
    assert [p.sn_offset for p in mixed.inspector.paired] == [3]
    assert mixed.cross_rank.matching.matched == full.cross_rank.matching.matched == sc.steps * len(sc.buckets)
    n = mixed.cross_rank.matching.matched
    for a, b in zip(mixed.cross_rank.ranks, full.cross_rank.ranks):
        assert abs(a.wait_ns - b.wait_ns) <= US_FLOOR * n and abs(a.transfer_ns - b.transfer_ns) <= US_FLOOR * n
        assert abs(a.clock_offset_ns) < 1_000         # the shift is taken out to the µs the format keeps


def test_logs_of_traced_ranks_only_beside_their_traces(tmp_path):
    # Every rank traced and logged: the traces speak for every rank, the logs only confirm the pairing.
    sc = synth.SCENARIOS["xrank_shared"]
    write_inspector(sc, tmp_path)
    synth.write(sc, tmp_path)
    both = api.report([str(tmp_path)], cache=False)
    alone = api.report([str(p) for p in sorted(tmp_path.glob("rank*.json.gz"))], cache=False)
    assert both.inspector.traced == list(range(sc.ranks)) and both.inspector.ranks == []
    assert both.cross_rank.ranks == alone.cross_rank.ranks and both.verdict == alone.verdict


def test_the_contract_addition_reads_both_ways(tmp_path):
    from golden.cases import GOLDEN
    from tracelens.contract import Report

    write_inspector(synth.SCENARIOS["xrank_shared"], tmp_path)
    r = api.report([str(tmp_path)], cache=False)
    assert Report.from_json(r.to_json()) == r
    # A report written before the ``inspector`` key existed reads back with it null.
    old = json.loads((GOLDEN / "one_bucket" / "report.json").read_text())
    old.pop("inspector", None)
    assert Report.from_json(json.dumps(old)).inspector is None
    # An inspector section written before ``traced`` and ``paired`` (logs alone) reads back with them empty.
    logs_only = json.loads((GOLDEN / "inspector_culprit_host_gap" / "report.json").read_text())
    for key in ("traced", "paired"):
        logs_only["inspector"].pop(key)
    got = Report.from_json(json.dumps(logs_only)).inspector
    assert (got.traced, got.paired, got.ranks) == ([], [], list(range(8)))


def test_the_transport_verdict_with_debug_logs_beside(tmp_path):
    # test_nccl_transport.py's TCP run (two ranks on two nodes, one 25 MiB all-reduce of 12 ms per step, no
    # waiting: busbw 26,214,400 B / 12 ms x 2(n-1)/n = 2.185 GB/s, under the 5 GB/s TCP ceiling), known from
    # Inspector logs, with debug logs saying RDMA with GPUDirect: the two disagree, as with traces.
    sc = synth.Scenario("tcp_run", buckets=[(10_000_000, 12_000_000)], steps=2, hosts=["h1", "h2"])
    write_inspector(sc, tmp_path)
    for rank, (host, pid) in enumerate((("h1", 100), ("h2", 200))):
        (tmp_path / f"{host}.{pid}.log").write_text("".join(
            f"{host}:{pid}:{pid + 1} [0] NCCL INFO {msg}\n" for msg in (
                f"comm 0x5581 rank {rank} nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
                f"Channel 00/0 : {rank}[0] -> {1 - rank}[0] [send] via NET/IB/0/GDRDMA")))
    net = api.report([str(tmp_path)], cache=False).transport
    assert (net.verdict, net.severity, net.logs) == ("rdma_gdr", "warning", 2)
    assert (net.bandwidth.source, net.bandwidth.range, net.bandwidth.collectives) == ("cross-rank", "tcp", 2)
    # The transport rounds busbw to 3 decimals, coarser than the µs the logs lose (2 µs of 12 ms: 0.00036 GB/s).
    assert net.bandwidth.busbw_gbps_p50 == round(26_214_400 / 12_000_000, 3)


def test_the_views_across_ranks_show_unknown_exposure(tmp_path):
    from tracelens.renderers import across_ranks, render

    write_inspector(synth.SCENARIOS["xrank_two_hosts"], tmp_path)
    r = api.report([str(tmp_path)], cache=False)
    assert {row["exposed_wait_ms"] for row in across_ranks.straggler_rows(r)} == {None}
    marks = across_ranks.wait_transfer(r).data[-1]
    assert marks.name == "exposed wait" and set(marks.y) == {None}       # no marker drawn at 0
    assert "From NCCL Inspector logs alone" in render(r, "html")     # the verdict, as the headline says it


def test_a_report_takes_the_logs_rows_once(tmp_path):
    # combine takes the logs' columns as it joins them (analyzers/run/log_ranks.py), so that a run's rows are
    # never held twice; what was read is still counted, and a second report of the same parsed logs says so
    # in one line instead of reporting no collectives.
    write_inspector(TWO, tmp_path)
    inputs = api.nccl_inputs([str(tmp_path)])
    records = [log.records for log in inputs.inspector]
    rep = api.combine([], nccl=inputs)
    assert rep.cross_rank.matching.matched == TWO.steps * len(TWO.buckets)
    assert [log.records for log in inputs.inspector] == records and all(r > 0 for r in records)
    assert all(log.columns == {} for log in inputs.inspector)
    with pytest.raises(ValueError, match=r"rows were taken by an earlier report") as e:
        api.combine([], nccl=inputs)
    assert "\n" not in str(e.value)
    again = api.combine([], nccl=api.nccl_inputs([str(tmp_path)]))
    assert again.to_json() == rep.to_json()


def test_logs_without_timestamps_beside_traces_are_not_used(tmp_path):
    # Beside traces, log rows are paired with the traces' collectives and moved onto their clocks: times made
    # from exec times are on no clock, so such logs are said to be unused (the traces' report stands).
    run, every = _mixed(CULPRIT, tmp_path, traced=[0, 1, 2, 3], verbose=False)
    assert "inspector-beside-traces" in {w.code for w in run.warnings}
    assert run.inspector is None and [r.rank for r in run.ranks] == [0, 1, 2, 3]
