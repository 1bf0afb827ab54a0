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


@pytest.mark.parametrize("named, fsdp", [(True, False), (False, False), (False, True)])
def test_every_rank_and_step_matches_the_generator(tmp_path, named, fsdp):
    rep = _report(tmp_path, named=named, fsdp=fsdp)
    truth = layout.truth(fsdp)          # per step, arithmetic on the plan
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
    rep = _report(tmp_path, named=False)
    r5 = rep.ranks[5]                   # pp 1, dp 0, tp 1: tp {4, 5}, dp/ep {5, 7}, pp {1, 5}
    rules = {g.dimension: (g.pg, g.rule, g.ops) for d in r5.dimensions for g in d.groups}
    assert rules == {"tp": ("1", "layout-contiguous", ["all_gather", "all_reduce"]),
                     "dp": ("2", "layout-strided", ["all_reduce"]),
                     "pp": ("3", "op", ["recv", "send"]),
                     "ep": ("4", "op", ["all_to_all"]),
                     "unknown": (None, "none", [])}


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
