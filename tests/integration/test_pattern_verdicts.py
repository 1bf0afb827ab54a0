"""Overlap-pattern verdicts that agree with their evidence.

- serialized wins when comm shares the compute stream and takes turns with it;
- a rank (or run) without a strict majority pattern is ``mixed``, with counts;
- every sentence of a diagnosis states exactly the numbers of its evidence (each sentence must match its
  template in full, so no number goes unchecked).
"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

import tracelens

from tracelens.analyzers import Thresholds
from tracelens.analyzers.rank.pattern import majority
from tracelens.cli import main

from conftest import corpus_file, host, kernel, write_trace
from fixtures import synth
from fixtures.findings import NUM, check_exposed, check_stall_detail, fields, ms, of, pct, run, write
from fixtures.findings import exposed_template as _exposed

US, MS = 1_000, 1_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


# Seven 50 µs all-reduces on the compute stream, each after a 1 ms backward kernel, then a 4 ms one after the
# last: comm takes turns with compute on one stream, and the last piece is 4 / 4.35 = 92 % of comm time.
ON_COMPUTE_STREAM = synth.Scenario("comm_on_compute_stream", [(1 * MS, 50 * US)] * 7 + [(1 * MS, 4 * MS)],
                                   comm_on_compute_stream=True)


# ------------------------------------------------------------------------------ serialized on one stream

@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_comm_taking_turns_on_the_compute_stream_is_serialized(fmt, tmp_path):
    rep = run(write(ON_COMPUTE_STREAM, tmp_path, fmt))
    for r in rep.ranks:
        for st in r.steps:
            ev = st.pattern_evidence
            # Generator truth: 8 comm pieces, each after compute (8 bursts), all on stream 7 with the compute,
            # 0 ns hidden; the final 4 ms is the exposed tail: 4 / (7 x 0.05 + 4) of the comm time.
            assert ev.bursts == 8 and ev.comm_on_compute_stream == 1.0 and st.overlap_ns == 0
            assert ev.tail_fraction == pytest.approx(4 / 4.35, abs=1e-9)   # two-phase by the tail alone
            assert st.pattern == "serialized"
    assert {r.pattern for r in rep.ranks} == {"serialized"} and rep.summary.pattern == "serialized"
    d = of(rep, "overlap-pattern")[0]
    assert d.title == "serialized: communication on the compute stream, taking turns with compute"
    assert "all communication starts after" not in d.detail and "own stream" in d.advice


def test_the_shared_stream_rule_is_what_decides(tmp_path):
    out = write(ON_COMPUTE_STREAM, tmp_path)
    # Raising the shared-stream bar above 100 % leaves only the tail rule: the 92 % tail reads two-phase.
    assert run(out, Thresholds(serialized_min_shared_fraction=1.01)).summary.pattern == "two-phase"
    # The same buckets with comm on its own stream (13) share nothing and overlap the next bucket's backward:
    # 7 x 50 µs hidden of 4.35 ms (8 %), the 4 ms tail after compute: two-phase, not serialized.
    own = run(write(dataclasses.replace(ON_COMPUTE_STREAM, name="own_stream", comm_on_compute_stream=False), tmp_path))
    for st in own.ranks[0].steps:
        assert st.pattern_evidence.comm_on_compute_stream == 0.0 and st.pattern == "two-phase"
        assert st.overlap_ns == 7 * 50 * US


def test_shared_stream_fraction_by_hand(tmp_path):
    # One step (µs): compute on stream 7 at [0,100) [150,250) [300,400); comm on stream 7 at [100,150) and
    # [250,300) (100 µs), comm on stream 13 at [400,500) (100 µs): half the comm time shares a compute stream.
    ev = [host("ProfilerStep#1", 0, 500, cat="user_annotation"),
          kernel("gemm_a", 0, 100), kernel(NCCL, 100, 50), kernel("gemm_b", 150, 100), kernel(NCCL, 250, 50),
          kernel("gemm_c", 300, 100), kernel(NCCL, 400, 100, stream=13)]
    (st,) = run(write_trace(tmp_path / "rank0.json", ev)).ranks[0].steps
    assert st.pattern_evidence.comm_on_compute_stream == 0.5
    # Three comm runs separated by compute, nothing hidden: serialized (0.5 meets the 0.5 default).
    assert st.pattern_evidence.bursts == 3 and st.overlap_pct == 0.0 and st.pattern == "serialized"


# ------------------------------------------------------------------------------------------------ mixed

def _shaped_steps(shapes: list[str]) -> list[dict]:
    """One 1 ms ProfilerStep per shape (µs): compute on stream 7, comm on stream 13.

    two-phase: compute [0,500), comm [500,900) after it (tail 1.0);
    sawtooth:  compute [0,800), comm [100,500) under it (100 % hidden, no tail);
    partial:   compute [0,500), comm [400,800) (25 % hidden, tail 300/400 = 0.75 < 0.8).
    """
    spans = {"two-phase": ((0, 500), (500, 400)), "sawtooth": ((0, 800), (100, 400)),
             "partial": ((0, 500), (400, 400))}
    ev = []
    for k, shape in enumerate(shapes):
        t = k * 1000
        (cs, cd), (ms_, md) = spans[shape]
        ev += [host(f"ProfilerStep#{k}", t, 1000, cat="user_annotation"), kernel("gemm", t + cs, cd),
               kernel(NCCL, t + ms_, md, stream=13)]
    return ev


def test_steps_without_a_strict_majority_are_mixed(tmp_path):
    write_trace(tmp_path / "rank0.json", _shaped_steps(["two-phase", "sawtooth", "partial", "two-phase"]))
    write_trace(tmp_path / "rank1.json", _shaped_steps(["two-phase", "two-phase", "two-phase", "sawtooth"]))
    rep = run(tmp_path)
    r0, r1 = rep.ranks
    assert [s.pattern for s in r0.steps] == ["two-phase", "sawtooth", "partial", "two-phase"]
    # 2 of 4 is no strict majority (before: two-phase, the most frequent).
    assert r0.pattern == "mixed" and r0.pattern_counts == {"two-phase": 2, "sawtooth": 1, "partial": 1}
    assert r1.pattern == "two-phase" and r1.pattern_counts == {"two-phase": 3, "sawtooth": 1}   # 3 of 4
    # The run: one mixed rank and one two-phase rank, no majority either.
    assert rep.summary.pattern == "mixed" and rep.summary.pattern_counts == {"mixed": 1, "two-phase": 1}
    data = json.loads(rep.to_json())
    assert data["ranks"][0]["pattern_counts"] == {"two-phase": 2, "sawtooth": 1, "partial": 1}


def test_majority_rule():
    assert majority(["two-phase", "sawtooth", "partial"]) == ("mixed", {"two-phase": 1, "sawtooth": 1, "partial": 1})
    assert majority(["sawtooth", "sawtooth", "partial"])[0] == "sawtooth"          # 2 of 3
    assert majority(["sawtooth", "partial"])[0] == "mixed"                         # a tie is no majority
    # Steps without communication count only when no step has any; steps with nothing to overlap not at all.
    assert majority(["no-comm", "no-comm", "partial"]) == ("partial", {"no-comm": 2, "partial": 1})
    assert majority(["no-comm", "no-comm"])[0] == "no-comm"
    assert majority([None, None]) == (None, {})


def test_gate_accepts_mixed(tmp_path, capsys):
    write_trace(tmp_path / "rank0.json", _shaped_steps(["two-phase", "sawtooth", "partial"]))
    assert main(["gate", str(tmp_path), "--no-config", "--require-pattern", "mixed"]) == 0
    assert main(["gate", str(tmp_path), "--no-config", "--require-pattern", "two-phase"]) == 1
    assert "pattern mixed (no pattern holds a majority of its steps)" in capsys.readouterr().out


# ------------------------------------------------------------------- sentences against their evidence
#
# analyzers/wording/ writes every sentence from a finding's evidence; tests/unit/test_wording.py checks each
# sentence of each verdict on hand-made evidence. Here: the analyzers' entries on generated and real traces,
# every number of their sentences against their evidence, and the generator truth of that evidence.


def test_sawtooth_sentences(tmp_path):
    d = of(run(write(synth.SCENARIOS["wfbp_100"], tmp_path)), "overlap-pattern")[0]
    ev = d.evidence
    assert d.title == "sawtooth: communication overlaps compute"
    f = fields(r"(?P<k>\d+) of (?P<n>\d+) all-reduces start during the compute phase; (?P<h>\d+\.\d) % of their "
               r"time is hidden", d.detail)
    assert (int(f["k"]), int(f["n"]), f["h"]) == (ev["started_during_compute"], ev["comm_kernels"],
                                                  pct(ev["overlap_pct"]))
    # Generator truth (metrics.md §6): 100 all-reduces, 83 start before the last backward kernel ends, 82.5 %
    # hidden, 2.1 ms of a 26.5 ms step exposed.
    assert (ev["comm_kernels"], ev["started_during_compute"], ev["exposed_comm_ns"]) == (100, 83, 2_100_000)
    m = re.fullmatch(_exposed(ev) + r": a smaller last bucket or earlier launches hide more", d.advice)
    check_exposed(ev, *m.groups())


def test_two_phase_sentences(tmp_path):
    d = of(run(write(synth.SCENARIOS["one_bucket"], tmp_path)), "overlap-pattern")[0]
    ev = d.evidence
    assert d.title == "two-phase: communication waits for the end of compute"
    # All of the step's communication starts at or after the compute phase ends: the order is proven.
    assert ev["started_during_compute"] == 0
    m = re.fullmatch(rf"(\d+) all-reduce starts after the compute phase; {_exposed(ev)}, (\d+\.\d) % hidden", d.detail)
    assert int(m[1]) == ev["comm_kernels"] == 1
    check_exposed(ev, m[2], m[3])
    assert m[4] == pct(ev["overlap_pct"])
    assert ev["exposed_comm_ns"] == 12 * MS and d.severity == "critical"   # 12 of a 24.5 ms step (generator)
    # Some communication started during the compute phase (one 50 µs piece between two backward kernels on the
    # comm stream, hidden), so the sentence gives the tail share instead of claiming all starts after.
    sc = synth.Scenario("early_piece", [(1 * MS, 50 * US), (1 * MS, 4 * MS)])
    d = of(run(write(sc, tmp_path)), "overlap-pattern")[0]
    ev = d.evidence
    assert d.title.startswith("two-phase") and ev["started_during_compute"] == 1
    m = re.fullmatch(rf"(\d+\.\d) % of communication \(({NUM}) ms of ({NUM}) ms\) runs after the compute phase, "
                     rf"(\d+) of (\d+) all-reduces starts during it; {_exposed(ev)}, (\d+\.\d) % hidden", d.detail)
    assert m[1] == pct(100 * ev["tail_fraction"]) and m[2] == ms(ev["tail_ns"]) and m[3] == ms(ev["comm_ns"])
    assert (int(m[4]), int(m[5])) == (ev["started_during_compute"], ev["comm_kernels"])
    check_exposed(ev, m[6], m[7])
    assert m[8] == pct(ev["overlap_pct"])
    assert ev["tail_ns"] == 4 * MS and ev["comm_ns"] == 4_050_000   # generator: the 4 ms all-reduce after compute


def test_serialized_sentences(tmp_path):
    d = of(run(write(synth.SCENARIOS["serialized"], tmp_path)), "overlap-pattern")[0]
    ev = d.evidence
    m = re.fullmatch(rf"(\d+\.\d) % of communication time runs on a stream that also runs compute; (\d+) all-reduces "
                     rf"in (\d+) bursts between compute, (\d+\.\d) % hidden; {_exposed(ev)}", d.detail)
    assert m[1] == pct(100 * ev["comm_on_compute_stream"]) and int(m[2]) == ev["comm_kernels"]
    assert int(m[3]) == ev["bursts"] and m[4] == pct(ev["overlap_pct"])
    check_exposed(ev, m[5], m[6])
    # Generator: 8 all-reduces of 0.4 ms on the compute stream, 3.2 ms exposed.
    assert (ev["comm_kernels"], ev["bursts"], ev["exposed_comm_ns"]) == (8, 8, 3_200_000)
    # Serialized without sharing a stream (launch order): comm on its own stream that never overlaps.
    rep = run(write(synth.SCENARIOS["serialized"], tmp_path), Thresholds(serialized_min_shared_fraction=1.01))
    d = of(rep, "overlap-pattern")[0]
    ev = d.evidence
    assert d.title == "serialized: communication between compute, never alongside it"
    m = re.fullmatch(rf"(\d+) all-reduces run in (\d+) bursts between compute but only (\d+\.\d) % of their time is "
                     rf"hidden; {_exposed(ev)}", d.detail)
    assert (int(m[1]), int(m[2]), m[3]) == (ev["comm_kernels"], ev["bursts"], pct(ev["overlap_pct"]))
    check_exposed(ev, m[4], m[5])


def test_partial_sentences(tmp_path):
    rep = run(write(synth.SCENARIOS["wfbp_100"], tmp_path), Thresholds(sawtooth_min_overlap_pct=90))
    d = of(rep, "overlap-pattern")[0]
    ev = d.evidence
    assert d.title == "partial overlap"
    m = re.fullmatch(rf"(\d+\.\d) % of communication is hidden and (\d+\.\d) % runs after the compute phase; {_exposed(ev)}",
                     d.detail)
    assert m[1] == pct(ev["overlap_pct"]) and m[2] == pct(100 * ev["tail_fraction"])
    check_exposed(ev, m[3], m[4])


def test_sync_stall_sentences(tmp_path):
    rep = run(write(synth.SCENARIOS["item_mid_backward"], tmp_path))
    for d in of(rep, "sync-stall"):
        ev, top = d.evidence, d.evidence["sites"][0]
        assert d.title == f"sync stall: {top['site']}"
        check_stall_detail(d, ev, top)
        # The stall's cost is the device idle it caused (the idle after it, at most the CPU's wait), never the
        # CPU's blocked time: here the host waited longer than the device then idled.
        assert ev["impact_ns"] == top["idle_caused_ns"] == min(top["blocked_ns"], top["idle_after_ns"])
        assert top["idle_caused_ns"] < top["blocked_ns"] and ev["material"]


@pytest.mark.parametrize("rel, title, steps_from", [
    # One cudaDeviceSynchronize after the loop: at the end of the whole capture as one step. (Its 39 inferred
    # steps end before it: the capture's last, partial cycle is no step, so it is no step's sync.)
    ("kineto_misc/param_single_gpu/linear_kineto.json.gz", "sync at the end of the step: cudaDeviceSynchronize",
     "whole"),
    ("kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json", "brief syncs, no stall: Event Sync",
     "auto")])
def test_sync_entries_without_a_mid_step_stall(rel, title, steps_from):
    (d,) = of(tracelens.report(corpus_file(rel), steps_from=steps_from, cache=False), "sync-stall")
    top = d.evidence["sites"][0]
    assert d.title == title and d.severity == "info" and d.advice == "" and d.evidence["impact_ns"] == 0
    m = re.fullmatch(rf"(\d+)×: the device idled ({NUM}) ms because of it; CPU blocked ({NUM}) ms, device idle "
                     rf"({NUM}) ms after it", d.detail)
    assert int(m[1]) == top["calls"] and m[2] == ms(top["idle_caused_ns"]) and m[3] == ms(top["blocked_ns"])
    assert m[4] == ms(top["idle_after_ns"])


@pytest.mark.parametrize("name", ["queued_comm", "late_comm"])
def test_launch_order_sentences(name, tmp_path):
    for d in of(run(write(synth.SCENARIOS[name], tmp_path)), "launch-order"):
        ev = d.evidence
        (c,) = ev["collectives"]
        if name == "queued_comm":
            m = re.fullmatch(rf"1 comm kernel\(s\) waited ({NUM}) ms behind compute launched after them \(worst: "
                             rf"ncclDevKernel_AllReduce_Sum_f32_RING_LL behind wgrad_gemm_kernel_3<float>, ({NUM}) ms\); "
                             rf"up to ({NUM}) ms could be hidden \(CUDA_DEVICE_MAX_CONNECTIONS was not recorded\)",
                             d.detail)
        else:
            m = re.fullmatch(rf"1 comm kernel\(s\) were launched ({NUM}) ms after compute they could have overlapped "
                             rf"had started \(worst: ncclDevKernel_AllReduce_Sum_f32_RING_LL launched ({NUM}) ms into "
                             rf"wgrad_gemm_kernel_3<float>\); up to ({NUM}) ms could be hidden "
                             rf"\(CUDA_DEVICE_MAX_CONNECTIONS was not recorded\)", d.detail)
        assert m[1] == m[2] == ms(c["delay_ns"]) and m[3] == ms(ev["hideable_ns"])
        assert ev["hideable_ns"] == min(c["delay_ns"], c["exposed_ns"]) == ev["impact_ns"]
        # The counts and sums the sentence states are evidence (one collective of one kind per entry here).
        kind = "queued" if name == "queued_comm" else "late"
        assert ev[kind] == {"count": 1, "delay_ns": c["delay_ns"], "worst": 0}
        assert ev["late" if kind == "queued" else "queued"] is None


