"""Which parallelism each collective serves, and how much of each dimension's communication is exposed.

A collective's dimension (``dp``, ``fsdp``, ``tp``, ``pp``, ``ep``, ``emb``, ``cp`` or ``unknown``) comes
from the first rule that decides (docs/metrics.md, "Parallelism dimensions"):

1. ``name``: its process group's description or name (Megatron ``TENSOR_MODEL_PARALLEL_GROUP``, DeviceMesh
   ``mesh_dp_shard``, ...), table :data:`_NAMES`;
2. ``scope``: the host ops around it name what it serves: TorchRec's sharded-embedding distribution
   (``KJTAllToAll``, ``PooledEmbeddingsAllToAll``, its comm ops; :data:`_EMB`) is ``emb``, an all-to-all
   inside MoE module or op names (:data:`_MOE`) ``ep``; ``kernel``: a DeepEP kernel (:data:`_DEEPEP`) is
   ``ep``;
3. ``op``: send/recv is pipeline parallel; an all-to-all nothing above named stays ``unknown`` (sharded
   embeddings, Ulysses sequence parallelism and MoE all exchange with all-to-all);
4. ``layout``: the group's members against the world: the whole world or a strided subset is data
   parallel, a contiguous proper subset tensor parallel. A collective that names no group (gloo) on a
   trace that lists exactly one process group is that group's (``only-group``).

Data-parallel groups split by operation: all-gather and reduce-scatter there shard the model (FSDP, ZeRO,
Megatron's distributed optimizer: ``fsdp``), anything else replicates it (``dp``). Per dimension and step
window W, with C_d the union of the dimension's communication and K the compute: ``comm_ns = |C_d ∩ W|``,
``overlap_ns = |C_d ∩ K ∩ W|``, ``exposed_comm_ns = comm_ns − overlap_ns``.
"""

from __future__ import annotations

import re

import numpy as np

from ...model.classify import kernel_op
from ...model.columns import factorize, group_rows, mask, remembered
from ...contract import DimensionStep, DimensionTotals, GroupRule, ratio
from .. import intervals as iv
from ..thresholds import material
from ..wording import Finding
from .context import RankContext

DIMENSIONS = ("dp", "fsdp", "tp", "pp", "ep", "emb", "cp", "unknown")
_DP = "dp-shaped"          # a data-parallel group: dp or fsdp by operation
_SEVERAL = "mixed"         # a group of several dimensions at once (TP x DP): the name does not decide

# (pattern on the lower-cased group description or name, dimension), first match wins. Megatron-LM
# parallel_state group_desc values, DeviceMesh's mesh_<dim> (torchtitan: dp_replicate, dp_shard, dp_shard_cp,
# dp_cp, cp, tp, pp, ep), and the short names scripts give.
_NAMES = [
    (r"expert_tensor_and_model|tensor_and_(data|context|expert)|^model_parallel|embedding", _SEVERAL),
    (r"expert_tensor", "tp"),
    (r"expert_data", _DP),
    (r"expert|(^|_)ep(_|$)|moe", "ep"),
    (r"dp_shard|fsdp|(^|_)zero|shard", "fsdp"),
    (r"dp_cp|data_parallel.*with_cp", _DP),
    (r"tensor|(^|_)tp(_|$)|sequence", "tp"),
    (r"pipeline|(^|_)pp(_|$)", "pp"),
    (r"context|(^|_)cp(_|$)", "cp"),
    (r"data|(^|_)dp(_|$)|replicate|ddp", _DP),
]
_NAMES_RE = [(re.compile(p), d) for p, d in _NAMES]
# Host ops around a collective (its metadata op, else its launch, and their ancestors), case-insensitive.
# TorchRec's sharded-embedding distribution: dist_data's modules and awaitables (KJTAllToAll,
# KJTAllToAllSplitsAwaitable, PooledEmbeddingsAllToAll / ReduceScatter / AllGather,
# SequenceEmbeddingsAllToAll, EmbeddingsAllToOne, "## all2all_data:kjt splits ##"), comm_ops' autograd
# functions and ranges (All2All_Pooled_Req, All2All_Seq_Req, All2Allv_Req, ReduceScatterBase_Req,
# AllGatherBase_Req, "## alltoall_fwd_single ##") and its train pipeline's "## sparse_data_dist ##".
_EMB = re.compile(r"kjt|(pooled|sequence)embeddings|embeddingsalltoone|sharded_?embedding|all2all_(pooled|seq)|"
                  r"all2allv_|variable_?batch_?(pooled_?)?(embeddings_?)?all2?all|alltoall_(fwd|bwd|seq)|"
                  r"reduce_?scatter(_?base|_?v)?_(req|wait)|all_?gather_?base_(req|wait)|sparse_data_dist",
                  re.IGNORECASE)
# Mixture-of-experts modules and ops (Megatron MoELayer, MoEAlltoAllTokenDispatcher, DeepSpeed MOELayer,
# experts, token dispatch); "moe" only as a word or in MoE's own capitals (not inside "homoeomorphic").
_MOE = re.compile(r"MoE|MOE|(?i:(?<![a-z])moe(?![a-z])|expert|deep_?ep|token_?dispatch)")
# Substrings every match of each pattern contains, lower-cased: most host op names (python frames among
# them, thousands a rank) are ruled out without running the pattern.
_EMB_HINTS = ("kjt", "embedding", "all2all", "alltoall", "scatter", "gather", "sparse_data_dist")
_MOE_HINTS = ("moe", "expert", "ep", "dispatch")
# DeepEP's dispatch / combine kernels (deep_ep::intranode::, deep_ep::internode::, internode_ll::; DeepSeek's
# own build names them dpsk::ep::).
_DEEPEP = re.compile(r"deep_?ep::|dpsk::ep::", re.IGNORECASE)
_SCOPE_DEPTH = 64           # ancestors looked at above a collective's op
_SHARDED_OPS = {"all_gather", "reduce_scatter"}
_P2P_OPS = {"send", "recv", "send_recv"}


def _by_name(*labels) -> str | None:
    for label in labels:
        if not isinstance(label, str):
            continue
        text = label.strip().lower()
        for pattern, dim in _NAMES_RE:
            if pattern.search(text):
                return None if dim == _SEVERAL else dim
    return None


def _by_layout(members: tuple[int, ...] | None, size: int, world: int | None) -> tuple[str | None, str]:
    if members:
        size = len(members)
    if size <= 1 or world is None or world <= 1:
        return None, "none"
    if size == world:
        return _DP, "layout-world"
    if not members:
        return None, "none"
    steps = np.diff(members)
    if (steps == 1).all():
        return "tp", "layout-contiguous"
    if steps.size and (steps == steps[0]).all():
        return _DP, "layout-strided"
    return None, "none"


def _hinted(pattern: re.Pattern, hints: tuple[str, ...]):
    def test(name: str) -> bool:
        low = name.lower()
        return any(h in low for h in hints) and pattern.search(name) is not None
    return remembered(test)


_is_emb, _is_moe = _hinted(_EMB, _EMB_HINTS), _hinted(_MOE, _MOE_HINTS)


def evidence(trace, coll_rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per collectives row, what the trace says it serves beyond its group: the dimension (``ep``, ``emb``
    or None) and the rule (``kernel``: a DeepEP kernel; ``scope``: a host op around it, its metadata op else
    the op that launched its kernel, or one of their ancestors, names TorchRec's embedding distribution or a
    MoE module or op). A DeepEP kernel decides first; embedding scopes before MoE names (a recommender's
    scopes do not name experts)."""
    dims = np.full(len(coll_rows), None, dtype=object)
    rules = np.full(len(coll_rows), None, dtype=object)
    if len(coll_rows) == 0:
        return dims, rules
    host, ops, coll = trace.host_ops, trace.device_ops, trace.collectives
    start = coll["host_idx"][coll_rows].copy()
    dev = coll["device_idx"][coll_rows]
    has_dev = dev >= 0
    kernel = np.zeros(len(coll_rows), dtype=bool)
    if has_dev.any():
        start[(start < 0) & has_dev] = ops["op_idx"][dev[(start < 0) & has_dev]]
        kernel[has_dev] = mask(ops["name"][dev[has_dev]], _DEEPEP.search)
    if len(host["name"]):
        emb_row, moe_row = mask(host["name"], _is_emb), mask(host["name"], _is_moe)
        parent = host["parent"]
        emb = np.zeros(len(coll_rows), dtype=bool)
        moe = np.zeros(len(coll_rows), dtype=bool)
        cur = start
        for _ in range(_SCOPE_DEPTH):
            live = np.flatnonzero(cur >= 0)
            if live.size == 0:
                break
            emb[live] |= emb_row[cur[live]]
            moe[live] |= moe_row[cur[live]]
            cur[live] = parent[cur[live]]
        dims[moe], rules[moe] = "ep", "scope"
        dims[emb], rules[emb] = "emb", "scope"
    dims[kernel], rules[kernel] = "ep", "kernel"
    return dims, rules


def attribute(op, name, pg_name, pg_desc, group_size, groups: dict, world: int | None,
              said: tuple | None = None) -> tuple[np.ndarray, list]:
    """The dimension of every collective (arrays of one row per collective) and one GroupRule per process
    group (and operation set) seen, saying which rule decided. ``said``: :func:`evidence` of each
    collective (None: none)."""
    n = len(op)
    dims = np.full(n, "unknown", dtype=object)
    # Decided once per distinct (group, description, size, operation), never per collective.
    op_code, op_uniq = factorize(np.asarray(op, dtype=object))
    usable = np.array([isinstance(o, str) and o not in ("coalesced", "wait") for o in op_uniq], dtype=bool)
    ops = np.full(n, None, dtype=object)
    good = (op_code >= 0) & usable[np.maximum(op_code, 0)] if len(op_uniq) else np.zeros(n, dtype=bool)
    ops[good] = np.asarray(op_uniq, dtype=object)[op_code[good]]
    name_code, name_uniq = factorize(np.asarray(name, dtype=object)[~good])
    from_name = np.array([kernel_op(x if isinstance(x, str) else None) for x in name_uniq] + [None], dtype=object)
    ops[~good] = from_name[name_code]               # -1 (no name) picks the trailing None
    said_dim, said_rule = said if said is not None else (np.full(n, None, dtype=object),) * 2
    rules: dict[tuple, GroupRule] = {}
    for (pg, desc, size, o, ev, how), rows in group_rows(
            np.asarray(pg_name, dtype=object), np.asarray(pg_desc, dtype=object),
            np.asarray(group_size, dtype=np.int64), ops, said_dim, said_rule):
        size = int(size)
        dim, rule = _by_name(desc, pg), "name"
        # MoE names count for an all-to-all only: a MoE layer's all-reduce is its tensor parallelism
        # (vLLM's FusedMoE reduces its output over the TP group).
        if dim is None and ev is not None and (ev == "emb" or how == "kernel" or o == "all_to_all"):
            dim, rule = ev, how
        if dim is None and o in _P2P_OPS:
            dim, rule = "pp", "op"
        if dim is None and o == "all_to_all":
            dim, rule = "unknown", "none"      # no evidence of what it exchanges
        if dim is None:
            members = groups.get(pg) if isinstance(pg, str) else None
            only = not isinstance(pg, str) and size <= 0 and len(groups) == 1
            if only:        # gloo collectives carry no group: the trace's only process group is theirs
                members = next(iter(groups.values()))
            dim, rule = _by_layout(members, size, world)
            if only and dim is not None:
                rule = "only-group"
        if dim == _DP:
            dim = "fsdp" if o in _SHARDED_OPS else "dp"
        dim = dim or "unknown"
        dims[rows] = dim
        key = (pg, desc, size if size > 0 else None, dim, rule)
        got = rules.get(key)
        if got is None:
            rules[key] = GroupRule(pg=pg if isinstance(pg, str) else None, desc=desc if isinstance(desc, str) else None,
                                   size=key[2], dimension=dim, rule=rule, ops=[] if o is None else [o],
                                   collectives=len(rows))
        else:
            got.collectives += len(rows)
            if o is not None and o not in got.ops:
                got.ops.append(o)
    out = sorted(rules.values(), key=lambda g: (DIMENSIONS.index(g.dimension), g.pg or "", g.desc or ""))
    for g in out:
        g.ops.sort()
    return dims, out


def measure(starts, ends, dims, compute: iv.IntervalSet, lo, hi) -> dict[str, tuple]:
    """Per dimension: (comm, overlap) ns per window and its activity count."""
    out = {}
    for dim in DIMENSIONS:
        sel = dims == dim
        if not sel.any():
            continue
        cset = iv.union(starts[sel], ends[sel])
        out[dim] = (iv.length_in(cset, lo, hi), iv.length_in(iv.intersect(cset, compute), lo, hi), int(sel.sum()))
    return out


def step_rows(measured: dict, w: int) -> dict[str, DimensionStep] | None:
    """The per-dimension metrics of window ``w`` (None when the rank has one dimension: its step's own)."""
    if len(measured) < 2:
        return None
    out = {}
    for dim, (comm, over, _) in measured.items():
        c, o = int(comm[w]), int(over[w])
        if c:
            out[dim] = DimensionStep(comm_ns=c, overlap_ns=o, exposed_comm_ns=c - o, overlap_pct=ratio(o, c, 100.0))
    return out


def totals(measured: dict, rules: list[GroupRule]) -> list[DimensionTotals]:
    out = []
    for dim, (comm, over, count) in measured.items():
        c, o = int(comm.sum()), int(over.sum())
        out.append(DimensionTotals(dimension=dim, collectives=count, comm_ns=c, overlap_ns=o, exposed_comm_ns=c - o,
                                   overlap_pct=ratio(o, c, 100.0),
                                   groups=[g for g in rules if g.dimension == dim]))
    return out


def analyze(ctx: RankContext) -> tuple[dict, list[GroupRule], np.ndarray]:
    """Attribute the rank's collectives and measure each dimension per step window; also the dimension of
    each row of the collective table.

    GPU mode: every communication activity on the analysed device, those not in the collective table (no
    metadata, a copy-engine transfer) ``unknown``; CPU mode: the gloo collectives."""
    trace, sets, windows, exposure, comm = ctx.trace, ctx.sets, ctx.windows, ctx.exposure, ctx.comm
    dims, rules = attribute(comm["op"], exposure["name"], comm["pg_name"], comm["pg_desc"],
                            comm["group_size"], ctx.groups, trace.meta.world_size,
                            evidence(trace, exposure["coll_idx"]))
    per_row = dims
    if sets.mode == "gpu":
        ops = trace.device_ops
        rows = sets.work[(ops["kind"][sets.work] == "comm")]
        row_dim = np.full(rows.size, "unknown", dtype=object)
        idx = exposure["device_idx"]
        at = np.searchsorted(rows, idx)
        known = at < rows.size
        known[known] = rows[at[known]] == idx[known]
        row_dim[at[known]] = dims[known]
        starts, ends, dims = ops["start_ns"][rows], ops["end_ns"][rows], row_dim
        missing = int(rows.size - known.sum())
        if missing:
            rules = rules + [GroupRule(pg=None, desc=None, size=None, dimension="unknown", rule="no-metadata",
                                       ops=[], collectives=missing)]
    else:
        starts = exposure["start_ns"]
        ends = starts + exposure["duration_ns"]
    return measure(starts, ends, dims, sets.compute, windows.start, windows.end), rules, per_row


def pipeline(ctx: RankContext, dims: np.ndarray, per_dim: list[DimensionTotals]) -> dict:
    """The rank's pipeline stage and, for a non-interleaved 1F1B schedule, its micro-batches per step and the
    schedule's expected bubble (shared reference metrics.md §8): per step the first and last stages send m
    times (activations, or gradients), a middle stage 2m times; the bubble is (PP − 1)/(m + PP − 1) of the
    step. Empty values where the trace does not say (no member list, no plain sends, an odd count)."""
    rank, comm, groups = ctx.rank, ctx.comm, ctx.groups
    out = {"stage": None, "micro_batches": None, "expected_bubble": None}
    pp = next((d for d in per_dim if d.dimension == "pp"), None)
    members = next((groups[g.pg] for g in (pp.groups if pp else []) if g.pg in groups and rank in groups[g.pg]),
                   None)
    if not members or len(members) < 2:
        return out
    size, stage = len(members), members.index(rank)
    out["stage"] = stage
    sel = (dims == "pp") & (comm["op"] == "send") & (comm["step"] >= 0)
    _, counts = np.unique(comm["step"][sel], return_counts=True)
    if counts.size:
        sends = int(np.median(counts))
        per = 1 if stage in (0, size - 1) else 2
        if sends % per == 0:
            m = sends // per
            out["micro_batches"], out["expected_bubble"] = m, (size - 1) / (m + size - 1)
    return out


def findings(ctx: RankContext, per_dim: list[DimensionTotals], pipe: dict | None = None) -> list[Finding]:
    """One ``parallelism`` finding per dimension whose exposed communication is material (per step on
    average). A rank whose communication is all data parallel (or all unattributed) gets none: its
    overlap-pattern finding already speaks for it."""
    rank, steps, env, th = ctx.rank, ctx.steps, ctx.trace.meta.env, ctx.thresholds
    if not steps or not per_dim or len(per_dim) == 1 and per_dim[0].dimension in ("dp", "unknown"):
        return []
    duration = sum(s.duration_ns for s in steps)
    idle = sum(s.idle_ns for s in steps)
    out = []
    for d in per_dim:
        impact = d.exposed_comm_ns // len(steps)
        if not material(th, impact, duration // len(steps)):
            continue
        share = d.exposed_comm_ns / duration if duration else 0.0
        worst = max(steps, key=lambda s: (s.by_dimension or {}).get(d.dimension, _NONE).exposed_comm_ns
                    if s.by_dimension is not None else s.exposed_comm_ns)
        sizes = sorted({g.size for g in d.groups if g.size})
        out.append(Finding(
            id="parallelism", severity="critical" if share >= th.critical_exposed_fraction else "warning",
            rank=rank, step=None, verdict=d.dimension,
            evidence={"dimension": d.dimension, "exposed_comm_ns": d.exposed_comm_ns, "comm_ns": d.comm_ns,
                      "overlap_pct": d.overlap_pct, "exposed_fraction": share, "duration_ns": duration,
                      "steps": len(steps), "collectives": d.collectives,
                      "groups": [g.desc or g.pg for g in d.groups if g.desc or g.pg],
                      "ops": sorted({o for g in d.groups for o in g.ops}),
                      "group_size": sizes[-1] if sizes else None, "idle_ns": idle,
                      "worst_step": worst.step,
                      "max_connections": env.get("CUDA_DEVICE_MAX_CONNECTIONS"),
                      "impact_ns": impact, "material": True,
                      **((pipe or {}) if d.dimension == "pp" else {})}))
    return out


_NONE = DimensionStep(comm_ns=0, overlap_ns=0, exposed_comm_ns=0, overlap_pct=None)
