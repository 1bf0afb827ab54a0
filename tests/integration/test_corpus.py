"""Every real trace in the shared corpus: parses, reports, and matches hand-checked or peer numbers."""

import json
import math

import pytest

import tracelens
from tracelens.renderers import render

from conftest import CORPUS, corpus_file

KINETO = sorted(str(p.relative_to(CORPUS)) for p in CORPUS.rglob("*.json*")) if CORPUS.is_dir() else []


def report(rel):
    return tracelens.analyze(tracelens.load(str(corpus_file(rel))))


def no_nan(obj):
    if isinstance(obj, float):
        return math.isfinite(obj)
    if isinstance(obj, dict):
        return all(no_nan(v) for v in obj.values())
    if isinstance(obj, list):
        return all(no_nan(v) for v in obj)
    return True


@pytest.mark.skipif(not KINETO, reason=f"shared corpus not found at {CORPUS}")
@pytest.mark.parametrize("rel", KINETO)
def test_every_corpus_trace_reports_without_nan(rel):
    rep = report(rel)
    data = json.loads(rep.to_json())
    assert data["schema"] == "tracelens.report/1"
    assert no_nan(data)
    for r in rep.ranks:
        assert r.steps, "at least one step (the whole trace when there are no ProfilerSteps)"
        for s in r.steps:
            # compute ∪ comm plus idle never exceeds the window (memcpy/memset fill the rest).
            assert s.compute_ns + s.comm_ns - s.overlap_ns + s.idle_ns <= s.duration_ns
            assert s.exposed_comm_ns == s.comm_ns - s.overlap_ns
            if s.comm_ns == 0:
                assert s.overlap_pct is None and s.exposed_comm_fraction in (0.0, None)
    assert "summary:" in render(rep, "text")
    assert render(rep, "markdown").startswith("# tracelens overlap report")


def test_trace_filter_matches_hta_on_the_steps_hta_keeps():
    # corpus.md, HTA 0.5.0 derived table: HTA drops the last ProfilerStep, so its whole-trace numbers are
    # our step 551: rank 0 comm ∪ 195,327 µs / overlap 23,068 µs; rank 1 168,027 / 33,691 µs.
    r0 = report("hta/trace_filter/sampled_rank-0.json.gz").ranks[0]
    r1 = report("hta/trace_filter/sampled_rank-1.json.gz").ranks[0]
    assert (r0.rank, r1.rank) == (0, 1)
    assert (r0.steps[0].step, r0.steps[0].comm_ns, r0.steps[0].overlap_ns) == (551, 195_327_000, 23_068_000)
    assert (r1.steps[0].step, r1.steps[0].comm_ns, r1.steps[0].overlap_ns) == (551, 168_027_000, 33_691_000)
    # HTA's comp_comm_overlap_pctg: 11.81 % and 20.05 %.
    assert round(r0.steps[0].overlap_pct, 2) == 11.81 and round(r1.steps[0].overlap_pct, 2) == 20.05


def test_df_index_resolver_is_two_phase_zero_overlap():
    # corpus.md: HTA 0.00 % overlap and comm ∪ 238,274 µs over the steps it keeps (2-5); 404 all-reduces per step.
    rep = report("hta/df_index_resolver/df_index_resolver.json.gz")
    r = rep.ranks[0]
    assert (r.rank, r.world_size) == (1, 2)
    assert [s.step for s in r.steps] == [2, 3, 4, 5, 6]
    assert sum(s.comm_ns for s in r.steps[:-1]) == 238_274_000
    assert r.totals.overlap_ns == 0 and r.totals.overlap_pct == 0.0
    assert sum(1 for c in rep.collectives if c.op == "all_reduce") == 2020


def test_nccl_parser_config_collective_sizes():
    # Kernel args in the file: allreduce, In msg nelems 6,637,568, dtype Float -> 26,550,272 bytes (x4 by hand);
    # broadcasts with 53,120 Float elements -> 212,480 bytes.
    rep = report("hta/nccl_parser_config/nccl_data.json.gz")
    sizes = {(c.op, c.bytes) for c in rep.collectives}
    assert ("all_reduce", 26_550_272) in sizes and ("broadcast", 212_480) in sizes
    assert sum(c.op == "all_reduce" for c in rep.collectives) == 15
    assert sum(c.op == "broadcast" for c in rep.collectives) == 6
    assert any(w.code == "profiler-dropped-records" for w in rep.warnings)


def test_old_traces_take_sizes_from_input_dims():
    # negative_queue: nccl:_reduce_scatter_base with Input Dims [[65536, 384]] float -> 25,165,824 × 4 bytes.
    rep = report("hta/negative_queue_length_values_check/rank0.json.gz")
    assert ("reduce_scatter", 65536 * 384 * 4) in {(c.op, c.bytes) for c in rep.collectives}
    assert sum(1 for c in rep.collectives) == 80


@pytest.mark.parametrize("rel", [
    "kineto_misc/param_single_gpu/linear_kineto.json.gz",
    "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
])
def test_no_comm_traces_give_null_overlap_and_zero_exposure(rel):
    rep = report(rel)
    assert rep.summary.overlap_pct is None
    assert rep.summary.exposed_comm_fraction == 0.0
    assert rep.ranks[0].totals.comm_ns == 0


def test_sync_events_are_not_compute():
    # alexnet: 41 cuda_sync events (16 Stream Sync, 5 Context Sync, 20 Stream Wait Event) are kept as kind
    # "sync"; compute equals the union of the 79 kernels only.
    t = tracelens.load(str(corpus_file("hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz")))[0]
    assert (t.device_ops["kind"] == "sync").sum() == 41
    assert (t.device_ops["kind"] == "compute").sum() == 79


def test_cpu_only_gloo_trace():
    # 10 gloo:all_reduce annotations on worker threads (corpus.md); rank 34 of 300; HTA crashes on this file.
    rep = report("hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz")
    r = rep.ranks[0]
    assert (r.rank, r.world_size, r.mode, r.device) == (34, 300, "cpu", None)
    assert len(rep.collectives) == 10 and all(c.op == "all_reduce" for c in rep.collectives)
    # First gloo:all_reduce: Input Dims [[321271]] float -> 1,285,084 bytes.
    assert rep.collectives[0].bytes == 321271 * 4
    assert r.totals.comm_ns > 0 and r.totals.overlap_pct is not None


def test_no_gpu_events_and_no_distributed_info():
    rep = report("hta/distributed_info_unavailable/distributed_info_not_found.json.gz")
    codes = {w.code for w in rep.warnings}
    assert {"rank-unknown", "no-device-activity"} <= codes
    assert rep.summary.overlap_pct is None


def test_b200_comm_on_compute_stream_and_symmetric_memory_kernels():
    # One ncclDevKernel_AllGather on stream 7 with full args (_allgather_base, Out 201,088 BFloat16 -> 402,176 B)
    # and 73 multimem_all_reduce_kernel (PyTorch SymmetricMemory) kernels, classified by the custom-AR rule.
    t = tracelens.load(str(corpus_file("tracelens_amd/b200/eager_trace.json.gz")))[0]
    comm = t.device_ops[t.device_ops["kind"] == "comm"]
    assert len(comm) == 74 and set(comm["stream"]) == {7}
    assert (comm["rule"] == "custom-allreduce-name").sum() == 73
    ag = t.collectives[t.collectives["op"] == "all_gather"].to_pandas().iloc[0]
    assert (ag["bytes"], ag["group_size"], ag["pg_name"]) == (402_176, 8, "3")
