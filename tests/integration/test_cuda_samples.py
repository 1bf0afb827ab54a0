"""The real single-GPU recordings in sample_traces/cuda_* (H100, torch 2.11, NCCL 2.28.9, world size 1).

Recorded by `tracelens collect` (examples/record_samples.py cuda): an 8 x 2048 MLP, batch 1024, steps 3-6
profiled. The numbers below come from the job's shapes (hand calculation) or from reading the raw trace
events; the trace is the truth for what the profiler saw.
"""

from __future__ import annotations

import gzip
import json

import pytest

import tracelens
from tracelens.analyzers.rank import overlap

from conftest import SAMPLES

# 8 layers of nn.Linear(2048, 2048): weight + bias = 2048 * 2048 + 2048 fp32 values each.
GRAD_BYTES = 8 * (2048 * 2048 + 2048) * 4          # 134,283,264


def load(name):
    return tracelens.load(str(SAMPLES / name))


def raw(name):
    with gzip.open(SAMPLES / name / "rank0.pt.trace.json.gz") as fh:
        return json.load(fh)["traceEvents"]


def of(rep, id_):
    return [d for d in rep.diagnoses if d.id == id_]


def test_recordings_are_real_cuda_nccl_world_of_one():
    for name in ("cuda_nccl_ddp", "cuda_nccl_item", "cuda_nccl_avg"):
        rep = tracelens.analyze(load(name))
        (rank,) = rep.ranks
        assert rank.device_name == "NVIDIA H100 80GB HBM3" and rank.world_size == 1
        assert [s.step for s in rank.steps] == [3, 4, 5, 6] and all(s.complete for s in rank.steps)
        m = json.loads((SAMPLES / name / "manifest.json").read_text())
        assert (m["versions"]["nccl"], m["ranks"][0]["backend"]) == ("2.28.9", "nccl")


def test_one_rank_average_runs_a_real_nccl_kernel_classified_as_all_reduce():
    # ReduceOp.AVG over one rank makes NCCL launch its oneRankReduce kernel (PreMulSum) on the flat gradient.
    rep = tracelens.analyze(load("cuda_nccl_avg"))
    assert len(rep.collectives) == 4                 # one explicit all_reduce per profiled step
    for c in rep.collectives:
        assert c.op == "all_reduce" and c.bytes == GRAD_BYTES and "oneRankReduce" in c.name
        assert c.exposed_ns == c.duration_ns > 0     # on the compute stream, after the backward: never hidden
    assert rep.ranks[0].pattern == "two-phase" and rep.ranks[0].totals.overlap_pct == 0.0


def test_one_rank_sum_does_no_device_work():
    # DDP's in-place SUM all-reduce over one rank: torch records nccl:all_reduce, NCCL launches nothing.
    (trace,) = load("cuda_nccl_ddp")
    names = trace.host_ops["name"]
    assert (names == "nccl:all_reduce").sum() == 16  # 4 steps x 4 buckets in the raw trace (25 MB buckets)
    assert not (trace.device_ops["kind"] == "comm").any()
    rep = tracelens.analyze([trace])
    assert rep.ranks[0].pattern == "no-comm" and rep.ranks[0].totals.overlap_pct is None


def test_item_sync_is_the_stall_and_its_chain_is_not_under_the_optimizer():
    rep = tracelens.analyze(load("cuda_nccl_item"))
    found = of(rep, "sync-stall")
    # Step 6's .item() held the CPU 9 µs: whatever idle follows, the sync cost the device at most that (brief).
    assert [(d.step, d.severity) for d in found] == [(3, "warning"), (4, "warning"), (5, "warning"),
                                                     (6, "info")]
    # Raw trace: the .item() stream syncs lasted 970.968, 543.681, 539.993 and 9.103 µs.
    raw_us = [e["dur"] for e in raw("cuda_nccl_item") if e.get("name") == "cudaStreamSynchronize"]
    assert raw_us == [970.968, 543.681, 539.993, 9.103]
    for d, us in zip(found, raw_us):
        top = d.evidence["sites"][0]
        # The collector steps the schedule inside Optimizer.step; before the nesting fix every step's
        # chain grew one more "Optimizer.step#SGD.step →".
        assert top["site"] == "aten::item → aten::_local_scalar_dense → cudaStreamSynchronize"
        assert top["calls"] == 1 and top["blocked_ns"] == round(us * 1000)
        assert top["idle_after_ns"] > 0 and (".item()" in d.advice) == (d.severity == "warning")
        assert top["idle_caused_ns"] == min(top["idle_after_ns"], top["blocked_ns"])
        # DDP's timer syncs come after the .item() drained the device: no idle is theirs (before the
        # fix each of the 8 was charged the whole gap, 1.8 ms a step, and outranked the .item()).
        (timers,) = [x for x in d.evidence["sites"] if x["call"] == "cudaEventSynchronize"]
        assert timers["calls"] == 8 and timers["idle_after_ns"] == 0


def test_ddp_timer_event_syncs_get_the_ddp_advice():
    # DDP's runtime logging (first 10 iterations) waits on 4 timer pairs: 8 cudaEventSynchronize per forward.
    rep = tracelens.analyze(load("cuda_nccl_ddp"))
    found = of(rep, "sync-stall")
    assert [d.step for d in found] == [3, 4, 5, 6]
    assert all([s["calls"] for s in d.evidence["sites"]] == [8] for d in found)
    assert all("DDP's runtime logging" in d.advice for d in found if d.severity != "info")


@pytest.mark.parametrize("name", ["cuda_nccl_ddp", "cuda_nccl_item", "cuda_nccl_avg"])
def test_idle_charged_to_syncs_never_exceeds_the_device_idle_time(name):
    # One idle stretch counts once: all calls' idle together fit in the gaps between busy intervals.
    (trace,) = load(name)
    rep = tracelens.analyze([trace])
    sets = overlap.interval_sets(trace, lambda *a: None)
    bs, be = sets.busy
    gaps = int((bs[1:] - be[:-1]).clip(min=0).sum())
    charged = sum(d.evidence["idle_after_ns"] for d in of(rep, "sync-stall"))
    assert charged <= gaps


def test_work_launched_before_the_capture_is_its_own_warning():
    # The GPU ran ~0.5 ms behind the CPU: step 2's optimizer and backward tail (launched before recording
    # started) still ran inside the capture. Their correlation ids are below every recorded launch's.
    (trace,) = load("cuda_nccl_ddp")
    codes = {w.code: w.count for w in trace.meta.warnings}
    assert "unlinked-device-ops" not in codes
    events = raw("cuda_nccl_ddp")
    launched = {e["args"]["correlation"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and "correlation" in e.get("args", {})}
    device = [e for e in events if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")]
    orphans = [e for e in device if e["args"]["correlation"] not in launched]
    assert codes["launched-before-capture"] == len(orphans) == 30
    assert all(e["args"]["correlation"] < min(launched) for e in orphans)
