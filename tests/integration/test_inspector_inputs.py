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


def test_logs_without_kernel_timestamps_match_nothing(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    write_inspector(sc, tmp_path, verbose=False)
    r = api.report([str(tmp_path)], cache=False)
    warned = {w.code: w.count for w in r.warnings}
    assert warned["inspector-no-timestamps"] == sc.ranks * sc.steps * len(sc.buckets)
    assert r.inspector.timed == 0 and r.inspector.records == sc.ranks * sc.steps * len(sc.buckets)
    assert r.cross_rank.matching.matched == 0


def test_logs_beside_traces_are_noted_not_mixed(tmp_path):
    sc = synth.SCENARIOS["xrank_shared"]
    write_inspector(sc, tmp_path)
    synth.write(sc, tmp_path)
    both = api.report([str(tmp_path)], cache=False)
    alone = api.report([str(p) for p in sorted(tmp_path.glob("rank*.json.gz"))], cache=False)
    assert [w.code for w in both.warnings if w.code.startswith("inspector")] == ["inspector-beside-traces"]
    assert both.inspector is None
    assert both.cross_rank.ranks == alone.cross_rank.ranks


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
