"""Which parallelism dimension a collective serves: the name, op and layout rules of
analyzers/rank/dimensions.py on hand-made rows (the rule table is docs/metrics.md, "Parallelism dimensions")."""

from __future__ import annotations

import numpy as np
import pytest

from tracelens.analyzers.rank.dimensions import attribute


def one(op, desc=None, pg="7", size=4, groups=None, world=16, name="ncclDevKernel_Generic", said=(None, None)):
    """The dimension and rule of a single collective (``said``: its evidence, dimension and rule)."""
    arr = lambda v: np.array([v], dtype=object)
    dims, rules = attribute(arr(op), arr(name), arr(pg), arr(desc), np.array([size]), groups or {}, world,
                            (arr(said[0]), arr(said[1])))
    assert len(rules) == 1 and rules[0].collectives == 1
    return dims[0], rules[0].rule


@pytest.mark.parametrize("desc, op, dim", [
    # Megatron-LM parallel_state group descriptions
    ("TENSOR_MODEL_PARALLEL_GROUP", "all_reduce", "tp"),
    ("PIPELINE_MODEL_PARALLEL_GROUP", "send", "pp"),
    ("DATA_PARALLEL_GROUP", "all_reduce", "dp"),
    ("DATA_PARALLEL_GROUP_WITH_CP", "reduce_scatter", "fsdp"),   # distributed optimizer: sharded
    ("EXPERT_MODEL_PARALLEL_GROUP", "all_to_all", "ep"),
    ("EXPERT_TENSOR_PARALLEL_GROUP", "all_reduce", "tp"),
    ("EXPERT_DATA_PARALLEL_GROUP", "all_reduce", "dp"),
    ("CONTEXT_PARALLEL_GROUP", "send", "cp"),
    # DeviceMesh (torchtitan) mesh_<dim>
    ("mesh_dp_shard", "all_gather", "fsdp"),
    ("mesh_dp_shard_cp", "reduce_scatter", "fsdp"),
    ("mesh_dp_replicate", "all_reduce", "dp"),
    ("mesh_dp_cp", "all_reduce", "dp"),
    ("mesh_tp", "reduce_scatter", "tp"),
    ("mesh_pp", "recv", "pp"),
    ("mesh_ep", "all_to_all", "ep"),
    ("mesh_cp", "all_gather", "cp"),
])
def test_the_group_name_decides(desc, op, dim):
    assert one(op, desc) == (dim, "name")


def test_a_group_of_several_dimensions_falls_through_to_the_op_and_layout():
    # TENSOR_AND_DATA_PARALLEL_GROUP spans TP x DP: its name says neither; its members (the whole world) say
    # data parallel
    assert one("all_reduce", "TENSOR_AND_DATA_PARALLEL_GROUP", size=16) == ("dp", "layout-world")
    assert one("all_reduce", "MODEL_PARALLEL_GROUP", size=3) == ("unknown", "none")


def test_the_op_decides_point_to_point_and_not_all_to_all():
    # Experts, sharded embeddings and Ulysses sequence parallelism all exchange with all-to-all: without a
    # name or a scope it is unattributed, even on a group laid out like data parallel (the whole world).
    assert one("all_to_all", "undefined") == ("unknown", "none")
    assert one("all_to_all", "default_pg", pg="0", size=16) == ("unknown", "none")
    assert one("send", "undefined") == ("pp", "op")
    assert one("recv", None) == ("pp", "op")
    assert one("send_recv", "default_pg", size=16) == ("pp", "op")


def test_the_evidence_around_a_collective_decides_after_its_name():
    emb, moe, deepep = ("emb", "scope"), ("ep", "scope"), ("ep", "kernel")
    # TorchRec's embedding distribution: any op it runs (all-to-all, its row-wise reduce-scatter)
    assert one("all_to_all", "default_pg", pg="0", size=16, said=emb) == ("emb", "scope")
    assert one("reduce_scatter", "default_pg", pg="0", size=16, said=emb) == ("emb", "scope")
    # MoE names decide an all-to-all only: a MoE layer's all-reduce is tensor parallel (layout decides)
    assert one("all_to_all", "undefined", said=moe) == ("ep", "scope")
    assert one("all_reduce", pg="1", groups={"1": (2, 3)}, size=2, world=8, said=moe) == ("tp", "layout-contiguous")
    # a DeepEP kernel is expert parallel whatever it records
    assert one(None, None, pg=None, size=-1, name="void deep_ep::internode::dispatch<8>(int4*)",
               said=deepep) == ("ep", "kernel")
    # a group named for a dimension outranks the scope
    assert one("all_to_all", "EXPERT_MODEL_PARALLEL_GROUP", said=emb) == ("ep", "name")


def test_evidence_from_the_scopes_and_kernels_of_a_trace():
    from tracelens.analyzers.rank.dimensions import evidence
    from tracelens.model.table import Labels
    # host rows: 0 "## sparse_data_dist ##" > 1 "## all2all_data:kjt splits ##" > 2 record_param_comms;
    # 3 "nn.Module: MoELayer_0" > 4 record_param_comms; 5 "nn.Module: FusedMoE_0" > 6 record_param_comms;
    # 7 "DistributedDataParallel.forward" > 8 record_param_comms; 9 "homoeomorphic_op" (no "moe" word)
    names = ["## sparse_data_dist ##", "## all2all_data:kjt splits ##", "record_param_comms",
             "nn.Module: MoELayer_0", "record_param_comms", "nn.Module: FusedMoE_0", "record_param_comms",
             "DistributedDataParallel.forward", "record_param_comms", "homoeomorphic_op"]
    parent = [-1, 0, 1, -1, 3, -1, 5, -1, 7, -1]
    host = {"name": Labels(*_codes(names)), "parent": np.array(parent)}
    # device rows 0-4: NCCL kernels, the last two with no collective op around them but the launch's (row 9);
    # row 5 a DeepEP kernel launched there too
    dev_names = ["ncclDevKernel_SendRecv"] * 5 + ["void deep_ep::internode::combine<8>(int4*)"]
    dev = {"name": Labels(*_codes(dev_names)), "op_idx": np.array([-1, -1, -1, -1, 9, 9])}
    coll = {"host_idx": np.array([2, 4, 6, 8, -1, -1]), "device_idx": np.arange(6)}

    class Trace:
        host_ops, device_ops, collectives = host, dev, coll
    dims, rules = evidence(Trace, np.arange(6))
    # FusedMoE's scope is MoE evidence here; attribute() lets it decide an all-to-all only
    assert list(zip(dims.tolist(), rules.tolist())) == [("emb", "scope"), ("ep", "scope"), ("ep", "scope"),
                                                       (None, None), (None, None), ("ep", "kernel")]


def _codes(values):
    cats = sorted(set(values))
    return np.array([cats.index(v) for v in values]), np.array(cats, dtype=object)


def test_the_layout_decides_unnamed_groups():
    world = 8
    assert one("all_reduce", "undefined", pg="0", size=8, world=world) == ("dp", "layout-world")
    assert one("all_gather", "default_pg", pg="0", size=8, world=world) == ("fsdp", "layout-world")
    # consecutive ranks: TP (innermost); strided: DP
    assert one("all_reduce", pg="1", groups={"1": (2, 3)}, size=2, world=world) == ("tp", "layout-contiguous")
    assert one("all_reduce", pg="2", groups={"2": (1, 3, 5, 7)}, size=4, world=world) == ("dp", "layout-strided")
    assert one("reduce_scatter", pg="2", groups={"2": (1, 5)}, size=2, world=world) == ("fsdp", "layout-strided")
    # neither contiguous nor evenly strided, or members unknown below the world size: no guess
    assert one("all_reduce", pg="3", groups={"3": (0, 1, 5)}, size=3, world=world) == ("unknown", "none")
    assert one("all_reduce", pg="4", size=4, world=world) == ("unknown", "none")
    # one rank, or no world size: nothing to lay out
    assert one("all_reduce", pg="5", size=1, world=world) == ("unknown", "none")
    assert one("all_reduce", pg="5", size=4, world=None) == ("unknown", "none")


def test_gloo_collectives_without_a_group_take_the_trace_s_only_group():
    assert one("all_reduce", None, pg=None, size=-1, groups={"0": (0, 1)}, world=2) == ("dp", "only-group")
    # two groups listed: which one is not known
    assert one("all_reduce", None, pg=None, size=-1, groups={"0": (0, 1), "1": (0,)}, world=2) == ("unknown", "none")


def test_coalesced_collectives_take_the_op_from_the_kernel_name():
    assert one("coalesced", "undefined", name="ncclDevKernel_SendRecv") == ("pp", "op")


def test_rules_are_counted_per_group_and_ops_merged():
    ops = np.array(["all_reduce", "all_gather", "all_reduce", "send"], dtype=object)
    names = np.array(["k"] * 4, dtype=object)
    pg = np.array(["1", "1", "1", "2"], dtype=object)
    desc = np.array(["TENSOR_MODEL_PARALLEL_GROUP"] * 3 + ["PIPELINE_MODEL_PARALLEL_GROUP"], dtype=object)
    dims, rules = attribute(ops, names, pg, desc, np.array([2, 2, 2, 2]), {}, 8)
    assert dims.tolist() == ["tp", "tp", "tp", "pp"]
    assert [(r.pg, r.dimension, r.rule, r.ops, r.collectives) for r in rules] == [
        ("1", "tp", "name", ["all_gather", "all_reduce"], 3), ("2", "pp", "name", ["send"], 1)]


def test_pipeline_stage_and_micro_batches():
    from types import SimpleNamespace
    from tracelens.analyzers.rank.dimensions import pipeline
    from tracelens.contract import DimensionTotals, GroupRule

    def ctx(rank, comm, groups):        # the three things of a RankContext the pipeline reads
        return SimpleNamespace(rank=rank, comm=comm, groups=groups)

    pp = DimensionTotals(dimension="pp", collectives=0, comm_ns=0, overlap_ns=0, exposed_comm_ns=0,
                         overlap_pct=None, groups=[GroupRule(pg="9", desc=None, size=4, dimension="pp", rule="op",
                                                             ops=["send"], collectives=0)])
    groups = {"9": (1, 5, 9, 13)}
    # rank 5 is stage 1 of 4, a middle stage: 8 sends a step in both steps (activations and gradients of
    # m micro-batches each) -> m = 4, 1F1B bubble (4 - 1)/(4 + 4 - 1) = 3/7; 3 receives are not counted
    comm = {"op": np.array(["send"] * 16 + ["recv"] * 3, dtype=object),
            "step": np.array([1] * 8 + [2] * 8 + [1] * 3)}
    dims = np.array(["pp"] * 19, dtype=object)
    assert pipeline(ctx(5, comm, groups), dims, [pp]) == {"stage": 1, "micro_batches": 4, "expected_bubble": 3 / 7}
    # rank 13 is the last stage: 8 sends a step are 8 micro-batches, (4 - 1)/(8 + 4 - 1) = 3/11
    assert pipeline(ctx(13, comm, groups), dims, [pp]) == {"stage": 3, "micro_batches": 8, "expected_bubble": 3 / 11}
    # an odd count on a middle stage, or no member list: not said
    odd = {"op": np.array(["send"] * 7, dtype=object), "step": np.array([1] * 7)}
    assert pipeline(ctx(5, odd, groups), dims[:7], [pp]) == {"stage": 1, "micro_batches": None, "expected_bubble": None}
    assert pipeline(ctx(5, comm, {}), dims, [pp]) == {"stage": None, "micro_batches": None, "expected_bubble": None}
