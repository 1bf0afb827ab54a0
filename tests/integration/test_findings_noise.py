"""What the report must not hide, and the noise it must not make.

- steps with nothing to overlap, or NCCL runs recorded without their GPU, get no pattern;
- the materiality floor: findings under it are info at most;
- stragglers.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from tracelens.analyzers import Thresholds, wording
from tracelens.analyzers.run import slow_ranks
from tracelens.cli import main
from tracelens.contract import RankResult, StepMetrics, Totals

from conftest import SAMPLES, corpus_file, host, kernel, write_trace
from fixtures import synth
from fixtures.findings import NUM, ms, of, pct, run, write

US, MS = 1_000, 1_000_000


# ------------------------------------------------------------- nothing to overlap, no GPU recorded

def _gloo_without_compute(path):
    # CPU-only gloo step (µs): the main thread (100) records only its ProfilerStep; two gloo all-reduces of
    # 300 and 200 µs run on gloo's worker thread (200).
    return write_trace(path, [
        host("ProfilerStep#5", 0, 1000, cat="user_annotation"),
        host("gloo:all_reduce", 100, 300, cat="user_annotation", tid=200),
        host("gloo:all_reduce", 500, 200, cat="user_annotation", tid=200)],
        distributedInfo={"backend": "gloo", "rank": 0, "world_size": 2})


def test_nothing_to_overlap_has_no_pattern(tmp_path):
    rep = run(_gloo_without_compute(tmp_path / "rank0.json"))
    (st,) = rep.ranks[0].steps
    assert st.compute_ns == 0 and st.comm_ns == 500 * US              # 300 + 200 µs of gloo
    # Before: two-phase (all communication "after" compute that does not exist), critical.
    assert st.pattern is None and rep.ranks[0].pattern is None and rep.summary.pattern is None
    (d,) = of(rep, "overlap-pattern")
    assert d.severity == "info" and d.title == "nothing to overlap: no compute in this step"
    m = re.fullmatch(rf"({NUM}) ms of communication \((\d+) all-reduces\) and no compute on the main thread", d.detail)
    assert m[1] == ms(d.evidence["comm_ns"]) and int(m[2]) == d.evidence["comm_kernels"] == 2
    warn = [w for w in rep.warnings if w.code == "no-device-activity"]
    assert warn and "gloo" in warn[0].message


def test_communication_only_gpu_step_has_nothing_to_overlap(tmp_path):
    # One step (µs) whose device ran two all-reduces of 200 and 100 µs and no compute kernel.
    nccl = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
    rep = run(write_trace(tmp_path / "rank0.json", [host("ProfilerStep#1", 0, 1000, cat="user_annotation"),
                                                    kernel(nccl, 100, 200), kernel(nccl, 400, 100)]))
    (st,) = rep.ranks[0].steps
    assert st.compute_ns == 0 and st.comm_ns == 300 * US and st.pattern is None   # before: two-phase
    (d,) = of(rep, "overlap-pattern")
    assert d.severity == "info" and d.advice.startswith("a communication-only step")
    m = re.fullmatch(rf"({NUM}) ms of communication \((\d+) all-reduces\) and no compute on the device", d.detail)
    assert m[1] == ms(d.evidence["comm_ns"]) and int(m[2]) == d.evidence["comm_kernels"] == 2


def test_corpus_cpu_only_gloo_trace_has_nothing_to_overlap():
    rep = run(corpus_file("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"))
    (st,) = rep.ranks[0].steps
    # The trimmed file keeps ProfilerStep#551 and no main-thread cpu_op inside it (corpus.md).
    assert st.step == 551 and st.compute_ns == 0 and st.comm_ns > 0
    assert st.pattern is None and rep.ranks[0].pattern is None
    assert [d.severity for d in of(rep, "overlap-pattern")] == ["info"]


def _nccl_cpu_only(path):
    # A DDP step recorded with CPU activity only: torch's nccl:all_reduce scopes, no kernel anywhere.
    return write_trace(path, [
        host("ProfilerStep#3", 0, 1000, cat="user_annotation"), host("aten::mm", 10, 400),
        host("nccl:all_reduce", 500, 20, cat="user_annotation"),
        host("nccl:all_reduce", 600, 20, cat="user_annotation")],
        deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])


def test_nccl_without_gpu_activity_is_not_called_gloo(tmp_path):
    rep = run(_nccl_cpu_only(tmp_path / "rank0.json"))
    (w,) = [w for w in rep.warnings if w.code == "no-device-activity"]
    # Before: "... gloo collectives as communication" and a no-comm verdict.
    assert "gloo" not in w.message and "CPU activity only" in w.message and "ProfilerActivity.CUDA" in w.message
    assert rep.ranks[0].steps[0].pattern is None and rep.ranks[0].pattern is None
    (d,) = of(rep, "no-gpu-activity")
    assert d.severity == "warning" and d.step is None and "ProfilerActivity.CUDA" in d.advice
    m = re.fullmatch(r"the trace has (\d+) NCCL calls on the CPU, and lists (\d+) GPU, but no kernel, copy or sync "
                     r"on any GPU: communication and its overlap cannot be measured", d.detail)
    assert (int(m[1]), int(m[2])) == (d.evidence["nccl_calls"], d.evidence["gpus_listed"]) == (2, 1)


def test_corpus_nccl_annotations_without_gpu_events():
    rep = run(corpus_file("hta/distributed_info_unavailable/distributed_info_not_found.json.gz"))
    (d,) = of(rep, "no-gpu-activity")
    assert d.evidence["nccl_calls"] == 6 and d.evidence["gpus_listed"] == 8   # corpus.md: 6 nccl:all_to_all, A100s
    assert not any("gloo" in w.message for w in rep.warnings)


# ------------------------------------------------------------------------------------------ stragglers

def _uncoupled_straggler(tmp_path, matched: bool = False):
    """The straggler scenario with each rank's all-reduces independent of the others' (no waiting, hosts
    unknown). Unless ``matched``, rank 3 records its first all-reduce with twice the size: its group stops
    matching there, so no collective is matched and only the step-time rule can speak."""
    sc = replace(synth.SCENARIOS["straggler"], coupled=False, hosts=[], seq=True,
                 mismatch=() if matched else (3, 2, 0))
    synth.write(sc, tmp_path)
    return tmp_path


def test_a_slower_rank_that_nobody_waits_for_is_no_straggler(tmp_path):
    # Matched collectives, rank 3 1.3x slower and last everywhere, but no rank waits (each rank's all-reduces
    # end on their own): it costs no one anything, and step times are not compared while collectives match.
    rep = run(_uncoupled_straggler(tmp_path, matched=True))
    assert rep.cross_rank.matching.matched == 3 * 6 and of(rep, "straggler") == []


def test_straggler_sentences_and_generator_truth(tmp_path):
    folder = _uncoupled_straggler(tmp_path)
    rep = run(folder)
    assert rep.cross_rank.matching.matched == 0
    (d,) = of(rep, "straggler")
    ev = d.evidence
    # Generator truth (metrics.expected): medians over each rank's 3 steps, then over the 4 ranks.
    truth = json.loads((folder / "metrics.expected").read_text())["ranks"]

    def median(xs):
        xs = sorted(xs)
        return (xs[len(xs) // 2] + xs[(len(xs) - 1) // 2]) / 2

    step = {int(r): median([s["duration_ns"] for s in rows]) for r, rows in truth.items()}
    comp = {int(r): median([s["compute_ns"] for s in rows]) for r, rows in truth.items()}
    assert d.rank == 3 and d.step is None and d.severity == "warning"     # the 1.3x slower rank
    assert (ev["step_ns"], ev["compute_ns"]) == (step[3], comp[3])
    assert ev["ranks_step_ns"] == median(list(step.values())) and ev["ranks_compute_ns"] == median(list(comp.values()))
    m = re.fullmatch(r"straggler: (step|compute) time (\d+\.\d) % above the median of (\d+) ranks", d.title)
    worst = max(ev["step_excess"], ev["compute_excess"])
    assert m[1] == ("compute" if worst == ev["compute_excess"] else "step") and m[2] == pct(100 * worst)
    assert int(m[3]) == ev["ranks"] == 4
    # The titled quantity first.
    first, second = ("compute", "step") if m[1] == "compute" else ("step", "compute")
    m = re.fullmatch(rf"median {first} ({NUM}) ms against ({NUM}) ms, median {second} ({NUM}) ms against ({NUM}) ms "
                     r"\(over its (\d+) complete steps and the (\d+) ranks; no collective was matched across ranks, "
                     r"so who waits for whom is not known\)", d.detail)
    assert m.groups() == (ms(ev[f"{first}_ns"]), ms(ev[f"ranks_{first}_ns"]), ms(ev[f"{second}_ns"]),
                          ms(ev[f"ranks_{second}_ns"]), str(ev["steps"]), str(ev["ranks"]))
    # Compute is 1.3x on rank 3 (forward + backward scaled): 30 % above the others, give or take rounding.
    assert ev["compute_excess"] == pytest.approx(0.3, abs=0.02)


def _rank(rank: int, steps: list[tuple[int, int]]) -> RankResult:
    """A RankResult whose complete steps have these (duration, compute) in ns; other fields do not matter."""
    metrics = [StepMetrics(step=k, start_ns=0, end_ns=d, duration_ns=d, compute_ns=c, comm_ns=0, overlap_ns=0,
                           exposed_comm_ns=0, idle_ns=d - c, overlap_pct=None, exposed_comm_fraction=0.0)
               for k, (d, c) in enumerate(steps)]
    totals = Totals(duration_ns=0, compute_ns=0, comm_ns=0, overlap_ns=0, exposed_comm_ns=0, idle_ns=0,
                    overlap_pct=None, exposed_comm_fraction=None)
    return RankResult(rank=rank, world_size=3, device=0, device_name=None, mode="gpu", source=f"rank{rank}",
                      steps=metrics, totals=totals)


def test_a_rank_with_longer_steps_but_the_same_compute_is_a_step_time_straggler():
    # Ranks 0 and 1: 10 ms steps with 6 ms compute; rank 2: 12 ms steps (it waits longer), the same compute.
    # Ranks' medians: step 10 ms, compute 6 ms; rank 2 is (12 - 10) / 10 = 20 % over in step time only.
    ranks = [_rank(0, [(10 * MS, 6 * MS)] * 2), _rank(1, [(10 * MS, 6 * MS)] * 2), _rank(2, [(12 * MS, 6 * MS)] * 2)]
    (f,) = slow_ranks.find(ranks, Thresholds())
    assert (f.rank, f.verdict, f.evidence["step_excess"], f.evidence["compute_excess"]) == (2, "step-time", 0.2, 0.0)
    d = wording.diagnosis(f)
    assert d.title == "straggler: step time 20.0 % above the median of 3 ranks" and d.severity == "warning"
    assert d.detail == ("median step 12.000 ms against 10.000 ms, median compute 6.000 ms against 6.000 ms (over its 2 "
                        "complete steps and the 3 ranks; no collective was matched across ranks, so who waits for "
                        "whom is not known)")


def test_more_compute_in_shorter_steps_holds_nobody_up():
    # Rank 2 computes 7 ms against 6 (17 % more) but its steps are 9 ms against 10: the others are not waiting
    # for it, whatever its compute says (the gloo run that once got "compute time 11 % above the median").
    ranks = [_rank(0, [(10 * MS, 6 * MS)] * 2), _rank(1, [(10 * MS, 6 * MS)] * 2), _rank(2, [(9 * MS, 7 * MS)] * 2)]
    assert slow_ranks.find(ranks, Thresholds()) == []


@pytest.mark.parametrize("folder", ["wfbp_100", "one_bucket", "compute_bound_8", "serialized", "legacy_wfbp",
                                    "nsys_wfbp_100", "gloo_sawtooth", "gloo_one_bucket", "gloo_no_sync"])
def test_balanced_runs_have_no_straggler(folder):
    assert of(run(SAMPLES / folder), "straggler") == []


def test_straggler_threshold(tmp_path):
    # Rank 3's compute is 29-30 % above the others': a 35 % bar lets it pass.
    folder = _uncoupled_straggler(tmp_path)
    assert [d.rank for d in of(run(folder), "straggler")] == [3]
    assert of(run(folder, Thresholds(straggler_min_excess=0.35)), "straggler") == []


def test_late_arrival_threshold():
    # The bundled sample: rank 3 arrives last at all 18 all-reduces (6 buckets x 3 steps, generator) and causes
    # all the waiting, so a bar of 19 late arrivals, or of more than 100 % of the waiting, lets it pass; the
    # step-time rule never speaks while collectives are matched.
    loose = dict(straggler_min_excess=0.35)
    assert [d.rank for d in of(run(SAMPLES / "straggler", Thresholds(**loose)), "straggler")] == [3]
    assert of(run(SAMPLES / "straggler", Thresholds(straggler_min_late_count=19, **loose)), "straggler") == []
    assert of(run(SAMPLES / "straggler", Thresholds(straggler_min_late_share=1.01, **loose)), "straggler") == []


# ----------------------------------------------------------------------------------------- materiality

def test_material_floor():
    from tracelens.analyzers.thresholds import material

    th = Thresholds()                               # 3 % of the step and 0.1 ms
    assert material(th, 300_000, 10 * MS)           # 0.3 ms of 10 ms: 3 %
    assert not material(th, 299_999, 10 * MS)       # just under 3 %
    assert not material(th, 99_999, 1 * MS)         # 10 % of a 1 ms step, but under 0.1 ms
    assert material(th, 100_000, 1 * MS)


def test_world_size_one_nccl_average_is_not_a_warning():
    # Real H100 recording, world size 1: NCCL's one-rank all-reduce, 0.11 ms of ~5 ms steps (2.0-2.3 %).
    rep = run(SAMPLES / "cuda_nccl_avg")
    found = of(rep, "overlap-pattern")
    assert len(found) == 4 and {d.severity for d in found} == {"info"}    # before: 4 two-phase warnings
    assert all(not d.evidence["material"] and d.evidence["impact_ns"] < 0.03 * d.evidence["duration_ns"]
               for d in found)
    loose = run(SAMPLES / "cuda_nccl_avg", Thresholds(material_min_fraction=0.01))
    assert {d.severity for d in of(loose, "overlap-pattern")} == {"warning"}


def test_small_sync_stalls_in_long_steps_are_info():
    # Real trace: 0.04 ms blocked + 0.77 ms idle in a 607 ms step (0.17 %) was a WARNING. A sync costs what the
    # device lost, at most the CPU's wait: step 552's one stall call cost 0.084 ms of a 623 ms step.
    rep = run(corpus_file("hta/trace_filter/sampled_rank-0.json.gz"))
    found = of(rep, "sync-stall")
    assert found and {d.severity for d in found} == {"info"}
    assert all(d.evidence["impact_ns"] < 0.03 * d.evidence["duration_ns"] for d in found)
    assert [(d.step, d.evidence["impact_ns"]) for d in found] == [(551, 0), (552, 84_000)]


def test_short_launch_delays_are_info(tmp_path):
    # late_comm: up to 0.305 ms could be hidden in a 12.62 ms step (2.4 %, generator: the last 0.8 ms all-reduce
    # is exposed for 0.305 ms); below the 3 % floor it is info, above a 2 % floor a warning.
    out = write(synth.SCENARIOS["late_comm"], tmp_path)
    found = of(run(out), "launch-order")
    assert {d.severity for d in found} == {"info"} and {d.evidence["hideable_ns"] for d in found} == {305_000}
    assert {d.severity for d in of(run(out, Thresholds(material_min_fraction=0.02)), "launch-order")} == {"warning"}


def test_thresholds_are_settable_by_name(capsys):
    assert main(["report", str(SAMPLES / "cuda_nccl_avg"), "--format", "json",
                 "--threshold", "material_min_fraction=0.01", "--threshold", "material_min_ns=50000"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {d["severity"] for d in data["diagnoses"] if d["id"] == "overlap-pattern"} == {"warning"}
