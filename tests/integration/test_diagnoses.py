"""Diagnoses: overlap pattern, sync stalls and launch order, on generator truth, real gloo runs and the corpus."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

import tracelens
from tracelens.analyzers import Thresholds
from tracelens.analyzers.rank import syncs
from tracelens.analyzers import intervals as iv
from tracelens.cli import main
from tracelens.errors import UsageError
from tracelens.renderers import render

from conftest import SAMPLES, corpus_file
from fixtures import synth

MS = 1_000_000


def report(sc, tmp_path, fmt="kineto", th=None):
    out = tmp_path / f"{sc.name}_{fmt}"
    (synth.write if fmt == "kineto" else synth.write_nsys)(sc, out)
    return tracelens.analyze(tracelens.load(str(out)), th)


def of(rep, id_):
    return [d for d in rep.diagnoses if d.id == id_]


# ---------------------------------------------------------------------------------------- overlap pattern

@pytest.mark.parametrize("name, pattern", [
    # The required verdicts for the generator scenarios.
    ("wfbp_100", "sawtooth"), ("one_bucket", "two-phase"), ("serialized", "serialized"),
    ("compute_bound_8", "sawtooth"), ("legacy_wfbp", "sawtooth"), ("straggler", "sawtooth"),
])
@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_generator_patterns(name, pattern, fmt, tmp_path):
    rep = report(synth.SCENARIOS[name], tmp_path, fmt)
    assert {s.pattern for r in rep.ranks for s in r.steps} == {pattern}
    assert {r.pattern for r in rep.ranks} == {pattern} and rep.summary.pattern == pattern
    found = of(rep, "overlap-pattern")
    assert len(found) == sum(len(r.steps) for r in rep.ranks)        # one entry per rank and step
    assert {d.severity for d in found} == ({"info"} if pattern == "sawtooth" else {"warning", "critical"} & {
        d.severity for d in found})


@pytest.mark.parametrize("name, tail, bursts, offset", [
    # Generator truth (metrics.md §6 worked numbers): wfbp_100 exposes 2.1 of 12 ms after the last backward
    # kernel and its comm stream never idles (one burst); the first all-reduce starts after bucket 0's
    # 0.1 ms of backward, i.e. 2.0 ms of forward + 0.1 ms into a 12.0 ms compute phase (2.0 + 100 x 0.1).
    ("wfbp_100", 2.1 / 12, 1, 2.1 / 12.0),
    # One bucket: all 12 ms after 2 ms forward + 10 ms backward; the first comm starts where compute ends.
    ("one_bucket", 1.0, 1, 1.0),
    # Serialized: 8 all-reduces of 0.4 ms between backward kernels, only the last after all compute.
    ("serialized", 0.4 / 3.2, 8, None),
    # Compute-bound: 8 x 0.5 ms all-reduces, only the last one (0.5 of 4 ms) after the last backward kernel.
    ("compute_bound_8", 0.5 / 4.0, 8, None),
])
def test_pattern_evidence_matches_the_timing_model(name, tail, bursts, offset, tmp_path):
    rep = report(synth.SCENARIOS[name], tmp_path)
    for st in rep.ranks[0].steps:
        ev = st.pattern_evidence
        assert ev.tail_fraction == pytest.approx(tail, abs=1e-9)
        assert ev.bursts == bursts
        assert ev.op == "all_reduce"
        if offset is not None:
            assert ev.first_comm_offset == pytest.approx(offset, abs=1e-4)


def test_pattern_sentences_name_the_evidence(tmp_path):
    # Every sentence against its evidence, verdict by verdict: tests/integration/test_pattern_verdicts.py.
    saw = of(report(synth.SCENARIOS["wfbp_100"], tmp_path), "overlap-pattern")[0]
    # 100 all-reduces, 83 of which start before the last backward kernel ends (comm-bound queue, model §6).
    assert saw.detail == "83 of 100 all-reduces start during the compute phase; 82.5 % of their time is hidden"
    two = of(report(synth.SCENARIOS["one_bucket"], tmp_path), "overlap-pattern")[0]
    # The optimizer kernel runs after the all-reduce: "after the last compute kernel" would be false.
    assert two.detail.startswith("1 all-reduce starts after the compute phase; 12.000 ms exposed (49.2 % of the step)")
    assert "bucket_cap_mb" in two.advice and "no_sync" in two.advice
    assert two.severity == "critical"   # 12 ms of a 24.5 ms step exposed, above the 0.25 default


def test_thresholds_change_the_verdict(tmp_path):
    sc = synth.SCENARIOS["wfbp_100"]   # 82.5 % hidden (metrics.md §6: 9.9 of 12 ms)
    assert report(sc, tmp_path, th=Thresholds(sawtooth_min_overlap_pct=90)).summary.pattern == "partial"
    th = Thresholds().with_overrides(["two_phase_min_tail=0.1"])   # its tail is 0.175
    assert report(sc, tmp_path, th=th).summary.pattern == "two-phase"


@pytest.mark.parametrize("bad", ["nope=1", "two_phase_min_tail", "serialized_min_bursts=x", "stall_min_ns=-5"])
def test_bad_thresholds_are_usage_errors(bad, capsys):
    with pytest.raises(UsageError):
        Thresholds().with_overrides([bad])
    assert main(["report", str(SAMPLES / "wfbp_100"), "--threshold", bad]) == 2
    assert "threshold" in capsys.readouterr().err


@pytest.mark.parametrize("folder, pattern", [
    # Real CPU gloo DDP runs (sample_traces/README.md): small buckets overlap, one bucket or no_sync
    # plus one explicit all-reduce leave every all-reduce after backward.
    ("gloo_sawtooth", "sawtooth"), ("gloo_one_bucket", "two-phase"), ("gloo_no_sync", "two-phase"),
])
def test_real_gloo_runs(folder, pattern):
    rep = tracelens.analyze(tracelens.load(str(SAMPLES / folder)))
    assert [r.rank for r in rep.ranks] == [0, 1] and all(r.mode == "cpu" for r in rep.ranks)
    assert {s.pattern for r in rep.ranks for s in r.steps} == {pattern}
    if pattern == "sawtooth":   # 0.25 MB buckets of a 6.4 MB model: several all-reduces per step
        assert all(s.pattern_evidence.comm_kernels >= 6 for r in rep.ranks for s in r.steps)
    else:                       # one all-reduce per step, started after the last backward op
        assert all(s.pattern_evidence.comm_kernels == 1 for r in rep.ranks for s in r.steps)
        assert all(s.pattern_evidence.first_comm_offset >= 0.95 for r in rep.ranks for s in r.steps)
    assert of(rep, "sync-stall") == [] and of(rep, "launch-order") == []   # CPU runs: no device to stall


def test_cpu_only_corpus_trace_evidence():
    rep = tracelens.analyze(tracelens.load(str(corpus_file(
        "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))))
    (st,) = rep.ranks[0].steps
    # The trimmed file keeps ProfilerStep#551 and no main-thread cpu_op inside it: all comm is exposed, with
    # no compute to place it against (offset null, not NaN), so there is no pattern (tests/integration/test_findings_noise.py).
    assert st.step == 551 and st.compute_ns == 0 and st.pattern is None
    assert st.pattern_evidence.tail_fraction == 1.0 and st.pattern_evidence.first_comm_offset is None


def test_no_comm_steps_have_no_pattern_entry():
    rep = tracelens.analyze(tracelens.load(str(corpus_file("kineto_misc/param_single_gpu/resnet_kineto.json.gz"))))
    assert rep.ranks[0].pattern == "no-comm" and of(rep, "overlap-pattern") == []
    assert rep.ranks[0].steps[0].pattern_evidence.tail_fraction is None   # null, never NaN


# ---------------------------------------------------------------------------------------------- sync stalls

@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_item_mid_backward(fmt, tmp_path):
    sc = synth.SCENARIOS["item_mid_backward"]
    rep = report(sc, tmp_path, fmt)
    truth = synth.sync_truth(sc)
    found = of(rep, "sync-stall")
    assert [(d.rank, d.step) for d in found] == [(r, s["step"]) for r in range(sc.ranks) for s in truth[r]]
    for d in found:
        t = next(s for s in truth[d.rank] if s["step"] == d.step)
        assert d.severity == "warning"
        site, copy = d.evidence["sites"]
        assert site["site"] == "aten::item → aten::_local_scalar_dense → cudaStreamSynchronize"
        # The copy to pageable memory before it also blocks the host, for 1 µs (generator): listed, no stall.
        assert copy["site"].endswith("cudaMemcpyAsync") and copy["stalls"] == 0 and copy["blocked_ns"] == 1000
        assert site["calls"] == site["stalls"] == 1 and not site["end_of_step"]
        assert site["blocked_ns"] == t["blocked_ns"]
        assert site["idle_after_ns"] == t["idle_after_ns"] >= sc.item_idle_ns   # at least the injected gap
        assert site["comm_in_flight_ns"] == t["comm_in_flight_ns"] > 0          # bucket 2's all-reduce
        assert ".item()" in d.advice


def test_no_false_stalls_on_generator_runs(tmp_path):
    for name in ("wfbp_100", "one_bucket", "serialized", "compute_bound_8", "legacy_wfbp", "straggler"):
        rep = report(synth.SCENARIOS[name], tmp_path)
        assert of(rep, "sync-stall") == [] and of(rep, "launch-order") == [], name


def test_measure_by_hand():
    # Hand-made timeline (ns): device busy [0,100) and [400,500); comm [50,150).
    # Call A blocks [20,110): the device drains at 100 (comm runs on to 150 but busy is [0,100) here), the
    # next activity starts at 400 -> idle 400 - 100 = 300; comm in flight during the block: [50,110) = 60.
    # Call B [450,460) returns while the device is busy -> idle 0; nothing launched after it -> end of step.
    calls = pd.DataFrame({"host_idx": [0, 1], "call": ["cudaStreamSynchronize"] * 2,
                          "start_ns": [20, 450], "end_ns": [110, 460]})
    busy = iv.union([0, 400], [100, 500])
    comm = iv.union([50], [150])
    m = syncs.measure(calls, busy, comm, np.array([5, 300]), np.array([0]), np.array([1000]), np.array([7]))
    assert m["idle_after_ns"].tolist() == [300, 0]
    assert m["comm_in_flight_ns"].tolist() == [60, 0]
    assert m["blocked_ns"].tolist() == [90, 10]
    assert m["end_of_step"].tolist() == [False, True]
    assert m["step"].tolist() == [7, 7]


def test_measure_charges_one_idle_stretch_once():
    # Device busy [0,100) and [400,500). Call A [20,110) waits through the drain at 100: idle 400 - 100 = 300.
    # Calls B [150,160) and C [200,203) begin after the drain, on an already idle device: they waited on
    # nothing, so 0 each (before, each was charged its own start-to-400 and the three summed to 790 ns in a
    # 300 ns gap). D [210,260) on a device idle since 100 also gets 0, however long it blocks.
    calls = pd.DataFrame({"host_idx": [0, 1, 2, 3], "call": ["cudaEventSynchronize"] * 4,
                          "start_ns": [20, 150, 200, 210], "end_ns": [110, 160, 203, 260]})
    busy = iv.union([0, 400], [100, 500])
    m = syncs.measure(calls, busy, iv.union([], []), np.array([300]), np.array([0]), np.array([1000]),
                      np.array([1]))
    assert m["idle_after_ns"].tolist() == [300, 0, 0, 0]
    # Two threads both waiting through the same drain at 100 ([10,105) and [30,120)): the stretch counts
    # once, for the call that began first.
    two = pd.DataFrame({"host_idx": [0, 1], "call": ["cudaStreamSynchronize"] * 2,
                        "start_ns": [10, 30], "end_ns": [105, 120]})
    m = syncs.measure(two, busy, iv.union([], []), np.array([300]), np.array([0]), np.array([1000]),
                      np.array([1]))
    assert m["idle_after_ns"].tolist() == [300, 0]


def test_corpus_alexnet_stream_syncs():
    rep = tracelens.analyze(tracelens.load(str(corpus_file(
        "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz"))))
    (d,) = of(rep, "sync-stall")
    copies = [s for s in d.evidence["sites"] if s["site"].endswith("aten::to → aten::_to_copy → aten::copy_ → "
                                                                  "cudaStreamSynchronize")]
    assert sum(s["calls"] for s in copies) == 16       # corpus.md: 16 cudaStreamSynchronize under aten::to
    assert any(s["call"] == "cudaDeviceSynchronize" for s in d.evidence["sites"])   # the 5 Context Syncs


def test_corpus_negative_queue_syncs():
    rep = tracelens.analyze(tracelens.load(str(corpus_file("hta/negative_queue_length_values_check/rank0.json.gz"))))
    calls = sum(s["calls"] for d in of(rep, "sync-stall") for s in d.evidence["sites"]
                if s["call"] == "cudaStreamSynchronize" and "aten::copy_" in s["site"])
    assert calls == 75                                  # corpus.md: 75 cudaStreamSynchronize under aten::to
    assert {d.step for d in of(rep, "sync-stall")} == {550, 551, 552, 553, 554}


def test_corpus_nsys_h100_long_stream_syncs():
    rep = tracelens.analyze(tracelens.load(str(corpus_file("nsys/nsys-ai/h100_2gpu_1s.sqlite"))))
    sites = [s for d in of(rep, "sync-stall") for s in d.evidence["sites"] if s["call"] == "cudaStreamSynchronize"]
    # corpus.md / nsys-sqlite.md: 8 cudaStreamSynchronize calls, 857 ms in total, the longest 428 ms.
    assert sum(s["calls"] for s in sites) == 8
    assert sum(s["blocked_ns"] for s in sites) == pytest.approx(857 * MS, abs=0.5 * MS)
    assert max(s["max_blocked_ns"] for s in sites) == pytest.approx(428 * MS, abs=0.5 * MS)


@pytest.mark.parametrize("rel", ["hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
                                 "kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
                                 "kineto_misc/kineto_unit_test_cuda_sync/kineto_before_fix_trace.json"])
def test_corpus_tiny_sync_fixtures_are_brief(rel):
    rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
    found = of(rep, "sync-stall")
    # µs-long fixtures: the syncs are reported, but well under the 50 µs stall threshold.
    assert len(found) == 1 and found[0].severity == "info" and found[0].title.startswith("brief syncs")


@pytest.mark.parametrize("rel", ["nsys/nsys-ai/healthy_1pct_minimal.sqlite", "hta/df_index_resolver/df_index_resolver.json.gz",
                                 "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"])
def test_corpus_without_syncs_has_no_stall(rel):
    rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
    assert of(rep, "sync-stall") == []


def test_python_frame_names_the_call_site():
    rep = tracelens.analyze(tracelens.load(str(corpus_file("tracelens_amd/b200/eager_trace.json.gz"))))
    (d,) = of(rep, "sync-stall")
    # The trace has with_stack frames: the innermost source line above the copy, not the built-in method.
    assert d.evidence["sites"][0]["python_frame"] == "vllm/v1/attention/backends/flashinfer.py(664): build"


# --------------------------------------------------------------------------------------------- launch order

@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
@pytest.mark.parametrize("name, kind", [("queued_comm", "queued"), ("late_comm", "late")])
def test_launch_order_scenarios(name, kind, fmt, tmp_path):
    sc = synth.SCENARIOS[name]
    rep = report(sc, tmp_path, fmt)
    found = of(rep, "launch-order")
    assert len(found) == sc.ranks * sc.steps                         # the last bucket of every step is exposed
    for d in found:
        (c,) = d.evidence["collectives"]
        assert c["kind"] == kind
        # Generator truth: queued waits the whole wgrad GEMM (1.5 ms); late is launched 1 ms into it.
        assert c["delay_ns"] == (sc.wgrad_ns if kind == "queued" else sc.late_ns)
        assert c["kernels"] == ["void wgrad_gemm_kernel_3<float>(float const*, float*)"]
        # Generator: queued could hide its whole 0.8 ms all-reduce in a 13.1 ms step (6.1 %, above the 3 % floor);
        # late only the 0.305 ms still exposed (2.4 %): info under the materiality floor.
        assert d.severity == ("warning" if kind == "queued" else "info")
    if kind == "queued":
        assert "CUDA_DEVICE_MAX_CONNECTIONS=1" in found[0].advice
        assert found[0].evidence["hideable_ns"] == 800_000          # the whole 0.8 ms all-reduce was exposed
    else:
        assert found[0].advice.startswith("launch the collective before wgrad_gemm_kernel_3")


def test_launch_order_names_the_recorded_setting(tmp_path):
    sc = dataclasses.replace(synth.SCENARIOS["queued_comm"], env={"CUDA_DEVICE_MAX_CONNECTIONS": "8"})
    synth.write_nsys(sc, tmp_path, per_rank=False)
    rep = tracelens.analyze(tracelens.load(str(tmp_path)))
    d = of(rep, "launch-order")[0]
    assert d.evidence["cuda_device_max_connections"] == "8"
    assert "CUDA_DEVICE_MAX_CONNECTIONS=8 in this run" in d.detail


# ---------------------------------------------------------------------------------------- contract & output

def test_diagnoses_in_json_text_and_markdown(tmp_path):
    rep = report(synth.SCENARIOS["item_mid_backward"], tmp_path)
    data = json.loads(rep.to_json())
    # clock-offset: rank 1's clock runs 123_457 ns ahead of rank 0's (generator default), estimated and corrected.
    assert {d["id"] for d in data["diagnoses"]} == {"overlap-pattern", "sync-stall", "clock-offset"}
    assert set(data["diagnoses"][0]) >= {"id", "severity", "rank", "step", "title", "detail", "evidence"}
    assert tracelens.Report.from_json(rep.to_json()).diagnoses == rep.diagnoses
    assert "NaN" not in rep.to_json().decode()
    text = render(rep, "text")
    # Both ranks run the same .item() (generator): one entry names them.
    assert "WARNING ranks 0–1 (2 of 2) · steps 2–4 · sync stall: aten::item" in text and "try: a tensor is read" in text
    md = render(rep, "markdown")
    assert "## Diagnoses" in md and "aten::\\_local\\_scalar\\_dense" in md and "*Try:*" in md


@pytest.mark.parametrize("name", ["item_mid_backward", "queued_comm", "late_comm", "wfbp_100", "serialized"])
def test_same_diagnoses_from_kineto_and_nsys(name, tmp_path):
    sc = synth.SCENARIOS[name]

    def key(rep):
        return [(d.id, d.severity, d.rank, d.step, d.title, d.detail, d.advice) for d in rep.diagnoses]

    assert key(report(sc, tmp_path, "kineto")) == key(report(sc, tmp_path, "nsys"))


def test_cli_threshold_flows_into_the_report(capsys):
    assert main(["report", str(SAMPLES / "wfbp_100"), "--format", "json",
                 "--threshold", "sawtooth_min_overlap_pct=90"]) == 0
    data = json.loads(capsys.readouterr().out)
    # wfbp_100 hides 82.5 % (metrics.md §6), below the raised bar and its tail 0.175 is short: partial.
    assert data["summary"]["pattern"] == "partial"
    assert {s["pattern"] for r in data["ranks"] for s in r["steps"]} == {"partial"}
