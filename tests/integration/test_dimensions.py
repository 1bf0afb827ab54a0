"""Exposed communication per parallelism dimension: generated DP x TP x PP x EP runs against the
generator's truth, and corpus traces with process-group metadata against hand counts from the raw JSON."""

from __future__ import annotations

import gzip
import json

import pytest

import tracelens
from tracelens.analyzers.thresholds import Thresholds, material

from conftest import corpus_file
from fixtures.synth import layout


def _report(tmp_path, **kw):
    layout.write(tmp_path, **kw)
    return tracelens.analyze(tracelens.load(str(tmp_path)))


MOE_SCOPE = "MoEAlltoAllTokenDispatcher.token_permutation"


@pytest.mark.parametrize("named, fsdp, scope", [(True, False, None), (False, False, MOE_SCOPE),
                                                (False, True, MOE_SCOPE), (False, False, None)])
def test_every_rank_and_step_matches_the_generator(tmp_path, named, fsdp, scope):
    rep = _report(tmp_path, named=named, fsdp=fsdp, a2a_scope=scope)
    # per step, arithmetic on the plan; an all-to-all with no group name and no MoE scope is unattributed
    truth = layout.truth(fsdp, a2a="ep" if named or scope else "unknown")
    assert len(rep.ranks) == layout.WORLD
    for r in rep.ranks:
        assert len(r.steps) == 2
        for s in r.steps:
            got = {d: (v.comm_ns, v.overlap_ns, v.exposed_comm_ns) for d, v in s.by_dimension.items()}
            assert got == {d: (t["comm_ns"], t["overlap_ns"], t["exposed_comm_ns"]) for d, t in truth.items()}
            assert s.by_dimension["pp"].overlap_pct == 0.0        # send and recv both fall in compute gaps
        totals = {d.dimension: (d.collectives, d.comm_ns, d.exposed_comm_ns) for d in r.dimensions}
        assert totals == {d: (2 * t["collectives"], 2 * t["comm_ns"], 2 * t["exposed_comm_ns"])
                          for d, t in truth.items()}


def test_rules_and_groups_of_the_unnamed_layout(tmp_path):
    rep = _report(tmp_path, named=False, a2a_scope=MOE_SCOPE)
    r5 = rep.ranks[5]                   # pp 1, dp 0, tp 1: tp {4, 5}, dp/ep {5, 7}, pp {1, 5}
    rules = {g.dimension: (g.pg, g.rule, g.ops) for d in r5.dimensions for g in d.groups}
    assert rules == {"tp": ("1", "layout-contiguous", ["all_gather", "all_reduce"]),
                     "dp": ("2", "layout-strided", ["all_reduce"]),
                     "pp": ("3", "op", ["recv", "send"]),
                     "ep": ("4", "scope", ["all_to_all"]),
                     "unknown": (None, "none", [])}


def test_an_all_to_all_with_no_evidence_is_unknown(tmp_path):
    # The same all-to-alls with no group name and no MoE scope: group 4 strides like data parallel, but an
    # all-to-all could be experts, sharded embeddings or sequence parallelism; nothing decides, and there is
    # no expert-parallel advice for it.
    rep = _report(tmp_path, named=False)
    r5 = rep.ranks[5]
    assert "ep" not in {d.dimension for d in r5.dimensions}
    unknown = [(g.pg, g.rule, g.ops) for d in r5.dimensions for g in d.groups if g.dimension == "unknown"]
    assert sorted(unknown, key=str) == sorted([("4", "none", ["all_to_all"]), (None, "none", [])], key=str)
    assert not [d for d in rep.diagnoses if d.id == "parallelism" and d.evidence["dimension"] == "ep"]


def test_a_finding_per_material_dimension_with_its_advice(tmp_path):
    rep = _report(tmp_path, named=True)
    found = {d.evidence["dimension"]: d for d in rep.diagnoses if d.id == "parallelism" and d.rank == 3}
    truth = layout.truth()
    th = Thresholds()
    step_ns = rep.ranks[3].steps[0].duration_ns
    # unknown: 0 exposed, not material; the others are (0.4 ms and more of a 10.3 ms step)
    assert set(found) == {d for d, t in truth.items() if material(th, t["exposed_comm_ns"], step_ns)}
    assert set(found) == {"dp", "tp", "pp", "ep"}
    for dim, d in found.items():
        assert d.severity == "warning" and d.step is None
        assert d.evidence["exposed_comm_ns"] == 2 * truth[dim]["exposed_comm_ns"]
    assert "bucket_cap_mb" in found["dp"].advice
    assert "tp-comm-overlap" in found["tp"].advice and "CUDA_DEVICE_MAX_CONNECTIONS" in found["tp"].advice
    assert "1F1B" in found["pp"].advice and found["pp"].evidence["group_size"] == 2
    # rank 3 is pipeline stage 0 of {3, 7}: one send a step (the plan's), a first stage sends once per
    # micro-batch, so 1 micro-batch and a plain-1F1B bubble of (2 - 1)/(1 + 2 - 1) = 50 %
    assert {k: found["pp"].evidence[k] for k in ("stage", "micro_batches", "expected_bubble")} == {
        "stage": 0, "micro_batches": 1, "expected_bubble": 0.5}
    assert "all-to-all" in found["ep"].advice
    assert found["tp"].evidence["groups"] == ["TENSOR_MODEL_PARALLEL_GROUP"]


def test_fsdp_advice(tmp_path):
    rep = _report(tmp_path, named=False, fsdp=True, ranks=[0])
    (d,) = [d for d in rep.diagnoses if d.id == "parallelism" and d.evidence["dimension"] == "fsdp"]
    assert "prefetch" in d.advice and "limit_all_gathers" in d.advice and "reshard_after_forward" in d.advice


def test_a_data_parallel_only_run_gets_no_dimension_finding(tmp_path):
    from fixtures import synth
    synth.write(synth.SCENARIOS["one_bucket"], tmp_path)
    rep = tracelens.analyze(tracelens.load(str(tmp_path)))
    assert [d.dimension for d in rep.ranks[0].dimensions] == ["dp"]
    assert rep.ranks[0].steps[0].by_dimension is None      # one dimension: the step's own numbers
    assert rep.ranks[0].dimensions[0].exposed_comm_ns == rep.ranks[0].totals.exposed_comm_ns
    assert not [d for d in rep.diagnoses if d.id == "parallelism"]


def _kernels(rel, prefix):
    doc = json.load(gzip.open(corpus_file(rel)))
    return [e for e in doc["traceEvents"] if e.get("cat") == "kernel" and e["name"].startswith(prefix)]


def test_corpus_hta_default_group_is_data_parallel():
    rel = "hta/nccl_parser_config/nccl_data.json.gz"
    rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
    r = rep.ranks[0]
    # world 2, one group "0" default_pg of ranks [0, 1]: the whole world, so data parallel; its 15 all-reduce
    # and 6 broadcast kernels (counted in the raw JSON) are all of the rank's communication
    assert len(_kernels(rel, "ncclKernel_")) == 21
    (d,) = r.dimensions
    assert (d.dimension, d.collectives) == ("dp", 21)
    assert [(g.pg, g.desc, g.rule, g.ops) for g in d.groups] == [("0", "default_pg", "layout-world",
                                                                  ["all_reduce", "broadcast"])]
    assert (d.comm_ns, d.exposed_comm_ns) == (r.totals.comm_ns, r.totals.exposed_comm_ns)


def test_corpus_b200_all_gather_on_the_world_group():
    rel = "tracelens_amd/b200/eager_trace.json.gz"
    rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
    r = rep.ranks[0]
    dims = {d.dimension: d for d in r.dimensions}
    assert set(dims) == {"fsdp", "unknown"}
    # The one NCCL kernel: _allgather_base in group "3" of 8 ranks, the world size: a data-parallel-shaped
    # all-gather (rule layout-world). Its duration in the raw JSON: 21.953 µs, nothing computing beside it.
    (ag,) = _kernels(rel, "ncclDevKernel_AllGather")
    assert ag["dur"] == pytest.approx(21.953)
    assert (dims["fsdp"].comm_ns, dims["fsdp"].exposed_comm_ns) == (21_953, 21_953)
    assert dims["fsdp"].groups[0].rule == "layout-world" and dims["fsdp"].groups[0].size == 8
    # The 73 symmetric-memory all-reduce kernels record no process group: unknown.
    mm = _kernels(rel, "void (anonymous namespace)::multimem_all_reduce_kernel")
    assert len(mm) == dims["unknown"].collectives == 73
    # They never overlap one another: their durations summed in the raw JSON, 2119.547 µs (2,119,548 ns
    # once each start and end is read to the nanosecond)
    assert sum(e["dur"] for e in mm) == pytest.approx(2119.547, abs=1e-3)
    assert dims["unknown"].comm_ns == 2_119_548
    assert dims["unknown"].comm_ns + dims["fsdp"].comm_ns == r.totals.comm_ns


# ------------------------------------------------------------------------ all-to-all: experts or embeddings

A2A = "ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)"
AR = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _recsys_doc(steps: int = 3):
    """A DLRM-like rank of a 2-rank job, per step (µs from the step's device start): four 250 µs GEMMs over
    [0, 1000); TorchRec's input distribution, a KJT all-to-all 800-1100 under "## sparse_data_dist ## >
    ## all2all_data:kjt splits ##" (200 µs under compute, 100 exposed); the pooled-embedding all-to-all
    1100-1500 under "nn.Module: PooledEmbeddingsAllToAll > All2All_Pooled_Req > ## alltoall_fwd_single ##"
    (400 exposed); an all-to-all with no scope 1500-1600 (100 exposed); DDP's all-reduce 1600-1800 under
    AccumulateGrad (200 exposed). Truth per step: emb 700 µs of communication, 500 exposed; unknown 100 and
    100; dp 200 and 200."""
    from fixtures.synth.families import GEMM, Doc, coll_args, nccl_scope
    from fixtures.synth.scenarios import COMM_STREAM
    doc = Doc()
    kjt = [("## sparse_data_dist ##", {}), ("## all2all_data:kjt splits ##", {})]
    pooled = [("nn.Module: PooledEmbeddingsAllToAll", {}), ("All2All_Pooled_Req", {}),
              ("## alltoall_fwd_single ##", {})]
    ddp = [("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", {})]
    a2a = [(name, coll_args("alltoall") if name == "record_param_comms" else args)
           for name, args in nccl_scope("all_to_all")[:2]]
    ar = nccl_scope("all_reduce")[:2]
    for k in range(steps):
        host = k * 3000
        dev = host + 400
        doc.step(k, host, host + 300)
        for i in range(4):
            doc.launch(host + 20 + 20 * i, GEMM, dev + 250 * i, 250)
        for j, (scope, s, e, name, inner) in enumerate([(kjt, 800, 1100, A2A, a2a), (pooled, 1100, 1500, A2A, a2a),
                                                        ([], 1500, 1600, A2A, a2a), (ddp, 1600, 1800, AR, ar)]):
            doc.launch(host + 120 + 40 * j, name, dev + s, e - s, stream=COMM_STREAM, op=inner[-1][0],
                       scope=scope + inner[:-1], device_args=inner[-1][1])
    return doc


def test_sharded_embedding_all_to_all_is_its_own_dimension(tmp_path):
    rep = tracelens.analyze(tracelens.load(str(_recsys_doc().write(tmp_path / "rank0.json"))))
    r = rep.ranks[0]
    truth = {"emb": (700, 500), "unknown": (100, 100), "dp": (200, 200)}       # µs per step, from the plan
    for s in r.steps:
        got = {d: (v.comm_ns // 1000, v.exposed_comm_ns // 1000) for d, v in s.by_dimension.items()}
        assert got == truth
    rules = {g.dimension: (g.rule, g.ops, g.collectives) for d in r.dimensions for g in d.groups}
    assert rules == {"emb": ("scope", ["all_to_all"], 6), "unknown": ("none", ["all_to_all"], 3),
                     "dp": ("layout-world", ["all_reduce"], 3)}
    (emb,) = [d for d in rep.diagnoses if d.id == "parallelism" and d.evidence["dimension"] == "emb"]
    assert emb.title.startswith("sharded embedding communication exposed: 1.500 ms")      # 3 x 500 µs
    assert "TrainPipelineSparseDist" in emb.advice and "DeepEP" not in emb.advice
    assert not [d for d in rep.diagnoses if d.id == "parallelism" and d.evidence["dimension"] == "ep"]


def _raw_count(rel, names):
    doc = json.load(gzip.open(corpus_file(rel)))
    return sum(1 for e in doc["traceEvents"] if e.get("ph") == "X" and e["name"] in names)


def test_corpus_torchrec_collectives_are_embeddings_never_experts():
    # negative_queue_length_values_check (a 16-rank recommender): its all-to-alls sit under TorchRec's
    # "## all2all_data:kjt … ##" and "## alltoall_fwd/bwd_single ##" ranges, and its 10 reduce-scatters and
    # 10 all-gathers under ReduceScatterBase_Req and its backward (row-wise sharded pooled embeddings; the
    # raw JSON has 10 c10d::_reduce_scatter_base_ and 10 c10d::_allgather_base_). The 10 all-reduces under
    # AccumulateGrad (DDP's dense gradients, 10 c10d::allreduce_) are not embeddings.
    rel = "hta/negative_queue_length_values_check/rank0.json.gz"
    rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
    dims = {d.dimension: d for d in rep.ranks[0].dimensions}
    assert "ep" not in dims
    (g,) = dims["emb"].groups
    assert (g.rule, g.ops) == ("scope", ["all_gather", "all_to_all", "reduce_scatter"])
    a2a = sum(1 for c in rep.collectives if c.op == "all_to_all")
    assert a2a == 45 and dims["emb"].collectives == a2a + 10 + 10
    assert _raw_count(rel, {"c10d::_reduce_scatter_base_"}) == _raw_count(rel, {"c10d::_allgather_base_"}) == 10
    assert dims["unknown"].groups[0].ops == ["all_reduce"] and dims["unknown"].collectives == \
        _raw_count(rel, {"c10d::allreduce_"}) == 10
    # trace_filter (2 ranks of a 128-rank DLRM job): each rank's 4 all-to-alls (its 4 c10d::alltoall_base_)
    # are embeddings; the Shampoo optimizer's all-gathers and DDP's all-reduces are not.
    for r in (0, 1):
        rel = f"hta/trace_filter/sampled_rank-{r}.json.gz"
        rep = tracelens.analyze(tracelens.load(str(corpus_file(rel))))
        dims = {d.dimension: d for d in rep.ranks[0].dimensions}
        assert set(dims) == {"emb", "unknown"}
        assert dims["emb"].collectives == _raw_count(rel, {"c10d::alltoall_base_"}) == 4
        assert dims["emb"].groups[0].ops == ["all_to_all"]
        assert not [d for d in rep.diagnoses if d.id == "parallelism" and d.evidence["dimension"] == "ep"]
        assert any(d.evidence.get("dimension") == "emb" for d in rep.diagnoses if d.id == "parallelism")


def test_corpus_sequence_parallel_all_to_all_is_not_expert_parallel():
    # nsys-ai mfu_2gpu_before: a 2-GPU sequence-parallel run whose all-to-alls (nccl:all_to_all NVTX ranges)
    # name no group and sit under no MoE or TorchRec range: unattributed, not expert parallel.
    rep = tracelens.analyze(tracelens.load(str(corpus_file("nsys/nsys-ai/mfu_2gpu_before.sqlite"))))
    for r in rep.ranks:
        dims = {d.dimension: d for d in r.dimensions}
        assert "ep" not in dims and dims["unknown"].groups[0].ops == ["all_to_all"]
