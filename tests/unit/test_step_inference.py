"""Inferred steps: generated loops whose iterations are known launch by launch, and the corpus's marked Kineto
traces with their markers removed, whose inferred steps must be the marked ones."""

from __future__ import annotations

import numpy as np
import pytest

import tracelens
from tracelens.analyzers.rank.overlap import primary_device
from tracelens.analyzers.rank.step_inference import MIN_STEPS, infer, with_steps
from tracelens.model import RankTrace
from tracelens.model.linking import take
from tracelens.model.table import Labels, Table

from ..conftest import corpus_file
from ..fixtures.synth.loops import Loop, loop_doc


def _load(lp: Loop, tmp_path) -> RankTrace:
    (trace,) = tracelens.load([loop_doc(lp).write(tmp_path / f"loop{lp.seed}.json")])
    return trace


def _unmarked(trace: RankTrace) -> RankTrace:
    """The trace as a capture without step markers would have it."""
    ops = trace.device_ops
    none = Table({c: np.zeros(0, dtype=np.int64) for c in ("step", "start_ns", "end_ns")})
    return RankTrace(meta=trace.meta, device_ops=Table({**dict(ops.items()), "step": np.full(len(ops), -1)}),
                     host_ops=trace.host_ops, collectives=trace.collectives, steps=none, threads=trace.threads)


def _without_optimizer_ranges(trace: RankTrace) -> RankTrace:
    """As an nsys capture sees the program: no torch ``Optimizer.step#`` range."""
    name = trace.host_ops["name"]
    hidden = np.array(["x" + c if c.startswith("Optimizer.") else c for c in name.categories.tolist()], object)
    host = Table({**dict(trace.host_ops.items()), "name": Labels(name.codes, hidden)})
    return RankTrace(meta=trace.meta, device_ops=trace.device_ops, host_ops=host,
                     collectives=trace.collectives, steps=trace.steps, threads=trace.threads)


def _launch_order(trace: RankTrace) -> np.ndarray:
    ops = trace.device_ops
    return np.argsort(take(trace.host_ops["start_ns"], ops["launch_idx"], 0), kind="stable")


def _inferred_steps(trace: RankTrace, **kw):
    found = infer(trace, primary_device(trace), **kw)
    assert found.steps is not None, found.why_not
    return found, with_steps(trace, found.steps).device_ops["step"]


@pytest.mark.parametrize("lp", [
    Loop(),                                            # Optimizer.step# range: the first launch after it
    Loop(optimizer="kernels"),                         # as nsys sees it: after the optimizer's kernels
    Loop(input_copy=False),                            # the data already on the device
    Loop(jitter=0.3, seed=11),                         # every duration ±30 %
    Loop(warmup=2, steps=9),                           # two warm-up iterations with other kernels
    Loop(layers=6, buckets=3, steps=5, loader_us=50),  # a short loader gap: no gap to lean on
    Loop(first_slow=4.0, seed=3),                      # an irregular first step: 4x longer (cold caches)
    Loop(cut_first=4, steps=9),                        # the capture opens inside the first iteration
], ids=["range", "kernels", "no-copy", "jitter", "warmup", "no-gap", "slow-first", "cut-first"])
def test_inferred_steps_are_the_generated_iterations(lp, tmp_path):
    trace = _load(lp, tmp_path)
    found, step = _inferred_steps(trace)
    order = _launch_order(trace)
    truth = np.asarray(lp.truth)                      # the iteration of each launch, in launch order
    got = step[order]
    # Truth: every iteration is one step, the warm-up ones too (their extra kernels come after the boundary);
    # an iteration the capture opened inside is none: its launches belong to no step.
    whole = range(1 if lp.cut_first else 0, lp.steps)
    if lp.cut_first:
        assert (got[truth == 0] == -1).all()
    for it in whole:
        mine = np.unique(got[truth == it])
        assert mine.size == 1 and mine[0] >= 0, (it, mine)
        assert (got == mine[0]).sum() == (truth == it).sum()
    assert len(found.steps) == len(whole)
    if lp.first_slow == 1.0:
        assert found.spread <= 2 * lp.jitter + 0.01   # step lengths within the durations' jitter
    else:                                             # the slow first step shows in the spread, not the median
        assert found.spread > 1.0 and found.median_ns == int(np.median(np.diff(found.steps["start_ns"])[1:]))
    assert found.boundary == ("Memcpy HtoD (Pinned -> Device)" if lp.input_copy
                              else "void gemm_fwd_kernel<float>(float const*, float*)")


def test_the_optimizer_rule_is_named(tmp_path):
    found = infer(_load(Loop(), tmp_path), 0)
    assert found.phase == "after the optimizer step, at the next input copy"
    # Generator truth: per iteration the copy, 4 x (GEMM, activation), the loss, 4 backward GEMMs, 2
    # all-reduces and 2 optimizer kernels.
    assert found.period == 1 + 8 + 1 + 4 + 2 + 2
    kernels = infer(_load(Loop(optimizer="kernels", seed=8), tmp_path), 0)
    assert kernels.phase == "after the optimizer's kernels, at the next input copy"


def test_a_cycle_without_an_optimizer_convinces_only_when_asked(tmp_path):
    trace = _load(Loop(optimizer="none"), tmp_path)
    refused = infer(trace, 0)
    assert refused.steps is None
    # Generator truth: the copy, 4 x (GEMM, activation), the loss, 4 backward GEMMs, 2 all-reduces, 1 activation.
    assert "holds no optimizer step" in refused.why_not and "17 device activities" in refused.why_not
    found, step = _inferred_steps(trace, forced=True)
    assert len(found.steps) == 8 and found.phase == "input copy after the longest launch gap"


@pytest.mark.parametrize("lp, why", [
    (Loop(steps=MIN_STEPS, last_partial=True), f"fewer than {MIN_STEPS} whole cycles of 18 device activities"),
    (Loop(steps=MIN_STEPS - 1), f"no sequence of kernels repeats {MIN_STEPS} times"),
    (Loop(steps=1), f"no sequence of kernels repeats {MIN_STEPS} times"),
])
def test_too_few_repeats_keep_the_whole_capture(lp, why, tmp_path):
    found = infer(_load(lp, tmp_path), 0)
    assert found.steps is None and why in found.why_not


def test_no_device_work_says_so(tmp_path):
    trace = _load(Loop(steps=3), tmp_path)
    assert "no device activity" in infer(trace, None).why_not


# Checked by hand against the ProfilerStep ranges: the step count, and every marked step's device activities
# are exactly one inferred step's (the marked traces of the corpus with 3 steps or more).
MARKED = ["hta/df_index_resolver/df_index_resolver.json.gz", "hta/nccl_parser_config/nccl_data.json.gz",
          "hta/negative_queue_length_values_check/rank0.json.gz",
          "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
          "kineto_misc/kineto_tb_plugin_resnet50_2021/worker0.1623143089861.pt.trace.json.gz"]


# Device-only (no Optimizer.step# range, as nsys records it): these three show their optimizer's kernels
# (multi_tensor_apply); the other two step SGD with plain elementwise kernels, which name no optimizer, so
# only --steps-from inferred takes their cycle (checked by hand: the same boundaries then).
OPTIMIZER_KERNELS = {MARKED[1], MARKED[2], MARKED[3]}


@pytest.mark.parametrize("as_nsys", [False, True], ids=["kineto", "device-only"])
@pytest.mark.parametrize("rel", MARKED)
def test_corpus_markers_removed_are_found_again(rel, as_nsys):
    (marked,) = tracelens.load([corpus_file(rel)])
    trace = _unmarked(_without_optimizer_ranges(marked) if as_nsys else marked)
    forced = as_nsys and rel not in OPTIMIZER_KERNELS
    if forced:
        assert "no optimizer step" in infer(trace, primary_device(trace)).why_not
    found, step = _inferred_steps(trace, forced=forced)
    assert len(found.steps) == len(marked.steps)
    was = marked.device_ops["step"]
    on = marked.device_ops["device"] == primary_device(marked)
    for s in marked.steps["step"]:
        rows = on & (was == s)
        mine = np.unique(step[rows])
        assert mine.size == 1 and mine[0] >= 0, (s, mine)
        assert (on & (step == mine[0])).sum() == rows.sum()


# Checked by hand: each of these repeats a block of kernels but holds no optimizer (FastVideo inference and a
# 300 ms window inside one training step of a video model, a vLLM-style decode loop, an MPI saxpy loop, and a
# synthetic export of 200 x (gemm_nn_128x128, elementwise_add): its kernels listed in start order with sqlite3).
UNCONVINCING = {"nsys/nsys-ai/h100_2gpu_1s.sqlite": 78, "nsys/nsys-ai/mfu_2gpu_before.sqlite": 157,
                "tracelens_amd/b200/eager_trace.json.gz": 50,
                "nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite": 4,
                "nsys/nsys-ai/healthy_1pct_minimal.sqlite": 2}


@pytest.mark.parametrize("rel", sorted(UNCONVINCING))
def test_corpus_blocks_without_an_optimizer_are_not_steps(rel):
    for trace in tracelens.load([corpus_file(rel)]):
        found = infer(trace, primary_device(trace))
        assert found.steps is None and found.period == UNCONVINCING[rel]
        assert "no optimizer step" in found.why_not


# The corpus's other nsys exports, none with step ranges (their kernels counted with sqlite3): extrap's three
# run 5-6 test kernels 1-5 times each (6-11 kernels in all, in no repeating order), and the mock RTX 3080
# export holds 2 kernels.
NO_CYCLE = {"nsys/extrap/con_kernel.sqlite": "repeats", "nsys/extrap/concurrent_s16_profile16.sqlite": "repeats",
            "nsys/extrap/ex-gpu.s10.sqlite": "repeats", "nsys/nsys-ai/mock_rtx3080.sqlite": "too few"}


@pytest.mark.parametrize("rel", sorted(NO_CYCLE))
def test_corpus_exports_without_a_loop_keep_the_whole_capture(rel):
    for trace in tracelens.load([corpus_file(rel)]):
        found = infer(trace, primary_device(trace))
        assert found.steps is None and NO_CYCLE[rel] in found.why_not


def test_corpus_unmarked_training_loops_get_their_steps():
    # param's single-GPU benchmarks: 40 and 30 Optimizer.step# ranges, no ProfilerStep. The first optimizer
    # step closes an iteration whose start the capture missed, so one fewer whole step.
    for rel, steps in (("kineto_misc/param_single_gpu/linear_kineto.json.gz", 39),
                       ("kineto_misc/param_single_gpu/resnet_kineto.json.gz", 29)):
        (trace,) = tracelens.load([corpus_file(rel)])
        found = infer(trace, primary_device(trace))
        assert found.steps is not None and len(found.steps) == steps, (rel, found)


def _analyzed(lp: Loop, tmp_path, steps_from="auto"):
    ctx = tracelens.context(steps_from=steps_from)
    return tracelens.analyze_rank(_load(lp, tmp_path), ctx)


def _codes(analysis) -> dict[str, str]:
    return {w.code: w.message for w in analysis.warnings}


def test_an_unmarked_capture_reports_its_inferred_steps(tmp_path):
    a = _analyzed(Loop(steps=8), tmp_path)
    r = a.result
    # Generator truth: 8 iterations, none marked; each inferred step is one iteration.
    assert r.steps_from == "inferred"
    assert len(r.steps) == 8 and [s.step for s in r.steps] == list(range(8))
    said = _codes(a)["steps-inferred"]
    assert said.startswith("no ProfilerStep#N ranges: 8 steps inferred from a cycle of")
    assert "(after the optimizer step, at the next input copy)" in said
    assert "no-steps" not in _codes(a)


def test_marked_steps_are_kept_and_can_be_set_aside(tmp_path):
    lp = Loop(steps=6, marked=True)
    marked = _analyzed(lp, tmp_path)
    # Generator truth: ProfilerStep#100..#105 around the six iterations.
    assert marked.result.steps_from == "markers"
    assert [s.step for s in marked.result.steps] == list(range(100, 106))
    whole = _analyzed(lp, tmp_path, "whole")
    assert whole.result.steps_from == "whole-capture"
    assert [s.step for s in whole.result.steps] == [None]
    assert "set aside" in _codes(whole)["no-steps"]
    inferred = _analyzed(lp, tmp_path, "inferred")
    assert inferred.result.steps_from == "inferred"
    # The inferred steps hold the marked ones' device work: the same per-step compute, in the same order.
    assert [s.compute_ns for s in inferred.result.steps] == [s.compute_ns for s in marked.result.steps]
    assert _codes(inferred)["steps-inferred"].startswith("--steps-from inferred: 6 steps")


def test_markers_only_keeps_an_unmarked_capture_whole(tmp_path):
    a = _analyzed(Loop(steps=8), tmp_path, "markers")
    assert a.result.steps_from == "whole-capture" and len(a.result.steps) == 1
    assert _codes(a)["no-steps"] == "no ProfilerStep#N ranges: the whole capture is reported as one step"


def test_a_refused_inference_says_why(tmp_path):
    a = _analyzed(Loop(steps=8, optimizer="none"), tmp_path)
    assert a.result.steps_from == "whole-capture" and len(a.result.steps) == 1
    said = _codes(a)["no-steps"]
    assert said.startswith("no ProfilerStep#N ranges, and no steps inferred: a cycle of")
    assert "holds no optimizer step" in said and said.endswith("the whole capture is reported as one step")
