"""Step windows when the CPU runs ahead of the GPU, work launched before the capture, and copy time per step."""

from __future__ import annotations

import gzip
import json
import pytest

import tracelens

from conftest import SAMPLES, corpus_file, host, kernel, write_trace
from fixtures import synth

MS = 1_000_000
# One step of the gpu_behind_* scenarios on the device (generator: 4 x 0.5 ms forward, 4 buckets of 1 ms
# backward + 0.4 ms all-reduce on the comm stream, 0.3 ms optimizer after the last all-reduce):
# forward [0, 2], bucket i backward [2+i, 3+i] with its all-reduce [3+i, 3.4+i], optimizer [6.4, 6.7] ms.
STEP_NS = 6_700_000
COMPUTE_NS = 6_300_000            # 2 + 4 x 1 + 0.3 ms
COMM_NS = 1_600_000               # 4 x 0.4 ms
OVERLAP_NS = 1_200_000            # all-reduces 0-2 each run under the next bucket's backward; the last is exposed
KERNELS_PER_STEP = 13             # 4 forward + 4 backward + 4 all-reduce + 1 optimizer


def report(sc, tmp_path, fmt="kineto", **kw):
    out = tmp_path / fmt
    (synth.write if fmt == "kineto" else synth.write_nsys)(sc, out)
    return tracelens.analyze(tracelens.load(str(out)), **kw)


def origin(sc, rank):
    return synth.BASE_NS + sc.offset(rank)


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
@pytest.mark.parametrize("lag", [1, 2])
def test_gpu_running_behind_the_cpu(lag, fmt, tmp_path):
    sc = synth.SCENARIOS[f"gpu_behind_{lag}"]
    rep = report(sc, tmp_path, fmt)
    for r in rep.ranks:
        # The device runs steps back to back from 1 ms on the rank's clock: the `lag` steps launched before
        # the capture first, then steps 3, 4, 5. Each window is exactly its own step's device work, however
        # early the CPU began the step (its span starts `lag` device steps before its work does).
        t0 = origin(sc, r.rank) + 1 * MS
        assert [s.step for s in r.steps] == [3, 4, 5]
        for i, s in enumerate(r.steps):
            assert (s.start_ns, s.end_ns) == (t0 + (lag + i) * STEP_NS, t0 + (lag + i + 1) * STEP_NS)
            assert (s.duration_ns, s.compute_ns, s.comm_ns, s.overlap_ns, s.exposed_comm_ns, s.idle_ns) == (
                STEP_NS, COMPUTE_NS, COMM_NS, OVERLAP_NS, COMM_NS - OVERLAP_NS, 0)
            assert s.copy_ns == 0
        assert r.totals.duration_ns == 3 * STEP_NS and r.totals.compute_ns == 3 * COMPUTE_NS
        # The work launched before the capture, once: `lag` whole steps.
        pre = r.pre_capture
        assert (pre.kernels, pre.copies, pre.busy_ns, pre.comm_ns, pre.copy_ns) == (
            lag * KERNELS_PER_STEP, 0, lag * STEP_NS, lag * COMM_NS, 0)
        assert (pre.start_ns, pre.end_ns) == (t0, t0 + lag * STEP_NS)
        assert pre.end_ns == r.steps[0].start_ns
    # The generator's arithmetic truth says the same.
    truth, pre_truth = synth.expected(sc), synth.pre_capture_truth(sc)
    for r in rep.ranks:
        assert [{k: getattr(s, k) for k in truth[r.rank][0]} for s in r.steps] == truth[r.rank]
        assert {k: getattr(r.pre_capture, k) for k in pre_truth[r.rank]} == pre_truth[r.rank]
    # (nsys-no-memcpy and nsys-no-sync: the generated export has no copy or sync tables.) An nsys export has no
    # process group: every all-reduce of both ranks (4 a step, the 3 captured steps and the `lag` launched
    # before) is matched across ranks by its order on the comm stream, which one warning counts.
    fallback = [("match-fallback", None, sc.ranks * 4 * (3 + lag))] if fmt == "nsys" else []
    assert [(w.code, w.rank, w.count) for w in rep.warnings if not w.code.startswith("nsys-no-")] == [
        ("launched-before-capture", r, lag * KERNELS_PER_STEP) for r in range(sc.ranks)] + fallback
    # Its all-reduces belong to no step; every captured step has its own four.
    steps = [c.step for c in rep.collectives if c.rank == 0]
    assert steps == [None] * (4 * lag) + [3] * 4 + [4] * 4 + [5] * 4


def test_pre_capture_in_json_and_null_without_it(tmp_path):
    rep = report(synth.SCENARIOS["gpu_behind_1"], tmp_path)
    data = json.loads(rep.to_json())
    assert data["ranks"][0]["pre_capture"]["kernels"] == KERNELS_PER_STEP
    assert tracelens.Report.from_json(rep.to_json()).ranks[0].pre_capture == rep.ranks[0].pre_capture
    clean = json.loads(report(synth.SCENARIOS["compute_bound_8"], tmp_path).to_json())
    assert [r["pre_capture"] for r in clean["ranks"]] == [None, None]


def test_pre_capture_work_is_in_no_window(tmp_path):
    # Hand-made (µs): kernel "tail" [0, 80) has no launch and correlation id 1, below every recorded
    # launch's: launched before the capture. Step 5's span [10, 40) launches "a" [80, 130) (queued behind
    # the tail), step 6's span [40, 70) launches "b" [130, 200).
    ev = [kernel("tail", 0, 80, corr=1),
          host("ProfilerStep#5", 10, 30, cat="user_annotation"),
          host("cudaLaunchKernel", 12, 2, cat="cuda_runtime", correlation=2), kernel("a", 80, 50, corr=2),
          host("ProfilerStep#6", 40, 30, cat="user_annotation"),
          host("cudaLaunchKernel", 45, 2, cat="cuda_runtime", correlation=3), kernel("b", 130, 70, corr=3)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    s5, s6 = rep.ranks[0].steps
    # Before: step 5 = [10, 130) with 70 µs of the tail in it (compute 120 µs).
    assert (s5.start_ns, s5.end_ns, s5.compute_ns, s5.idle_ns) == (80_000, 130_000, 50_000, 0)
    assert (s6.start_ns, s6.end_ns, s6.compute_ns) == (130_000, 200_000, 70_000)
    pre = rep.ranks[0].pre_capture
    assert (pre.kernels, pre.busy_ns, pre.comm_ns, pre.start_ns, pre.end_ns) == (1, 80_000, 0, 0, 80_000)
    (w,) = [w for w in rep.warnings if w.code == "launched-before-capture"]
    assert w.count == 1 and "no step" in w.message


def test_work_launched_between_spans_delays_the_next_window(tmp_path):
    # Step 1's span [0, 50) launches nothing; a launch at 60 (between the spans) runs [70, 150); step 2's
    # span [100, 200) launches a kernel running [150, 180). Step 2 begins when the earlier work ends, 150.
    ev = [host("ProfilerStep#1", 0, 50, cat="user_annotation"),
          host("cudaLaunchKernel", 60, 2, cat="cuda_runtime", correlation=1), kernel("x", 70, 80, corr=1),
          host("ProfilerStep#2", 100, 100, cat="user_annotation"),
          host("cudaLaunchKernel", 110, 2, cat="cuda_runtime", correlation=2), kernel("y", 150, 30, corr=2)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    s1, s2 = rep.ranks[0].steps
    assert (s1.start_ns, s1.end_ns) == (0, 50_000)
    # Before: [100, 200) with 50 µs of "x" counted as step 2's compute (80 µs).
    assert (s2.start_ns, s2.end_ns, s2.compute_ns, s2.idle_ns) == (150_000, 200_000, 30_000, 20_000)


def test_window_ends_keep_every_nanosecond_when_a_step_has_no_device_work(tmp_path):
    # Epoch µs as a 2023 trace writes them: step 1's span [0, 50) launches nothing, step 2's span [100, 200)
    # a kernel running [150, 251), so its window ends at the kernel's end. 1.7e18 ns is past float64's
    # exact integers (its spacing there is 256 ns): the end must come through in int64, not as the nearest
    # float (which the step with no work once forced, through a reindexed per-step maximum).
    t0 = 1_700_000_000_000_000                                   # µs
    ev = [host("ProfilerStep#1", t0, 50, cat="user_annotation"),
          host("ProfilerStep#2", t0 + 100, 100, cat="user_annotation"),
          host("cudaLaunchKernel", t0 + 110, 2, cat="cuda_runtime", correlation=2), kernel("y", t0 + 150, 101, corr=2)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    s1, s2 = rep.ranks[0].steps
    end = (t0 + 251) * 1000                                      # the kernel's end, in ns
    assert end != int(float(end))                                # a value float64 would have moved
    assert (s1.end_ns, s2.start_ns, s2.end_ns) == ((t0 + 50) * 1000, (t0 + 100) * 1000, end)
    assert (s2.duration_ns, s2.compute_ns, s2.idle_ns) == (151_000, 101_000, 50_000)   # [100, 251) less the kernel


def test_gpu_waiting_for_the_cpu_is_step_time(tmp_path):
    # The opposite shape: the CPU is the bottleneck. Step 1's span [0, 100) launches a kernel [20, 50),
    # step 2's span [100, 200) one at [120, 150). The device then waits for the CPU: that idle time is
    # the step's (each window runs to its span's end), 70 µs of 100 in both steps.
    ev = [host("ProfilerStep#1", 0, 100, cat="user_annotation"),
          host("cudaLaunchKernel", 10, 2, cat="cuda_runtime", correlation=1), kernel("a", 20, 30, corr=1),
          host("ProfilerStep#2", 100, 100, cat="user_annotation"),
          host("cudaLaunchKernel", 110, 2, cat="cuda_runtime", correlation=2), kernel("b", 120, 30, corr=2)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", ev))))
    assert [(s.start_ns, s.end_ns, s.idle_ns) for s in rep.ranks[0].steps] == [
        (0, 100_000, 70_000), (100_000, 200_000, 70_000)]
    assert rep.ranks[0].pre_capture is None


def _raw_ns(events, base):
    """(start, end) ns of raw Kineto events with relative 3-decimal µs times (parsed as the trace says)."""
    return [(base + round(e["ts"] * 1000), base + round(e["ts"] * 1000) + round(e["dur"] * 1000)) for e in events]


def test_real_recording_first_step_starts_after_the_pre_capture_work():
    # sample_traces/cuda_nccl_ddp: the GPU ran ~0.7 ms behind the CPU when recording began; 30 device
    # activities (step 2's tail) have no launch in the trace (tests/integration/test_cuda_samples.py).
    with gzip.open(SAMPLES / "cuda_nccl_ddp" / "rank0.pt.trace.json.gz") as fh:
        doc = json.load(fh)
    base, events = doc["baseTimeNanoseconds"], doc["traceEvents"]
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e["args"]]
    launched = {e["args"]["correlation"] for e in launches}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    orphans = [e for e in device if e["args"]["correlation"] not in launched]
    (span,) = [e for e in events if e.get("name") == "ProfilerStep#3" and e["cat"] == "user_annotation"]
    (span_ns,) = _raw_ns([span], base)
    in_step = {e["args"]["correlation"] for e, (t, _) in zip(launches, _raw_ns(launches, base))
               if span_ns[0] <= t < span_ns[1]}
    own = [e for e in device if e["args"]["correlation"] in in_step and e["cat"] == "kernel"]

    rep = tracelens.analyze(tracelens.load(str(SAMPLES / "cuda_nccl_ddp")))
    (rank,) = rep.ranks
    s3 = rank.steps[0]
    pre_end = max(end for _, end in _raw_ns(orphans, base))
    assert s3.start_ns == pre_end > span_ns[0]
    # Everything runs on stream 7, one activity after another: step 3's compute is exactly its own
    # kernels' durations (4.540 ms; 5.048 ms before, with step 2's tail in it).
    assert s3.compute_ns == sum(end - start for start, end in _raw_ns(own, base))
    pre = rank.pre_capture
    assert (pre.kernels, pre.copies) == (sum(e["cat"] == "kernel" for e in orphans),
                                         sum(e["cat"] != "kernel" for e in orphans)) == (12, 18)
    assert pre.end_ns == pre_end
    assert pre.start_ns == min(start for start, _ in _raw_ns(orphans, base))


@pytest.mark.slow
def test_corpus_trace_whose_first_step_held_the_previous_one():
    # corpus hta/negative_queue_length_values_check/rank0 (A100, integer µs): recording began while the GPU
    # was still ~155 ms into step 549, which the CPU had launched before the capture. Step 550 read
    # 371.6 ms with 67.6 ms of compute against 212.5-216.5 ms and ~36 ms for steps 551-554.
    path = corpus_file("hta/negative_queue_length_values_check/rank0.json.gz")
    with gzip.open(path) as fh:
        events = json.load(fh)["traceEvents"]
    launched = {e["args"]["correlation"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    early = [e for e in device if 0 <= e["args"].get("correlation", -1) < min(launched)]
    rep = tracelens.analyze(tracelens.load(str(path)))
    (rank,) = rep.ranks
    s550 = rank.steps[0]
    assert len(early) == 872 and rank.pre_capture.kernels + rank.pre_capture.copies == 872
    assert s550.start_ns == rank.pre_capture.end_ns == max(e["ts"] + e["dur"] for e in early) * 1000
    assert s550.start_ns - 1683564901548726000 == 155_348_000     # ProfilerStep#550 began at 1683564901548726 µs
    # It ends with the last device activity launched inside its span, and is now as long as the others.
    (span,) = [e for e in events if e.get("name") == "ProfilerStep#550" and e["cat"] == "user_annotation"]
    own = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
           and span["ts"] <= e["ts"] < span["ts"] + span["dur"] and "correlation" in e.get("args", {})}
    assert s550.end_ns == max(e["ts"] + e["dur"] for e in device if e["args"].get("correlation") in own) * 1000
    assert s550.duration_ns < 1.01 * max(s.duration_ns for s in rank.steps[1:])
