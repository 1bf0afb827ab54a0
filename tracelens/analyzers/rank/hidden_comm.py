"""Communication that no kernel name reveals (``hidden-comm``): the run meant to communicate, but the device
work that did it is counted as compute or copies.

Intent: the rank's outermost collective CPU scopes (``nccl:*``, ``record_param_comms``, ``c10d::*`` other
than waits, NCCL's collective API ranges such as ``ncclAllReduce`` in nsys exports), or a distributed run (``distributedInfo`` world size above 1). Look-alikes: compute kernels,
not classified as communication, whose names read like communication (:data:`LOOKS_LIKE_COMM`: collective
words, symmetric memory, NVSHMEM, flux, ...). On the rank's main device (GPU mode), one finding per rank:

- ``no-comm-kernel``: collective scopes but no communication activity on the device at all. The evidence
  names the scopes, the device work launched inside them that is not communication, and the look-alikes;
- ``look-alike``: communication intent and look-alike kernels worth a material share of the step.

Never for a single-rank run (world size 1: a collective moves nothing between GPUs), a gloo run (its
collectives run on CPU threads, not on the device) nor a trace without device activity (``no-gpu-activity``
covers it). The suggested ``--comm-pattern`` matches exactly the
look-alike (else the scope-launched) kernels' base names. docs/metrics.md, "Hidden communication".
"""

from __future__ import annotations

import re

import numpy as np

from ...model.columns import Lookup, categorical_of, distinct, isin, mask, remembered
from ...model.linking import nearest_ancestor
from ..thresholds import material
from ..wording import Finding
from .context import RankContext

LOOKS_LIKE_COMM = re.compile(r"all_?reduce|all_?gather|reduce_?scatter|all_?to_?all|alltoall|send|recv|p2p|peer|"
                             r"symm|multimem|nvshmem|one_?shot|two_?shot|flux|comm", re.IGNORECASE)
# The same pattern, case-sensitive, for a name lowered first: on the long templated kernel names re's
# case-insensitive search is many times slower. For ASCII names the two agree (IGNORECASE also folds a few
# non-ASCII letters such as U+017F onto "s", hence ASCII only).
_LOWER_COMM = re.compile(LOOKS_LIKE_COMM.pattern)
_LISTED = 4                   # names listed per kind of evidence


# NCCL's own API ranges of collectives (nsys NVTX), not its communicator or group management calls.
_NCCL_COLLECTIVE = re.compile(r"nccl(?:AllReduce|AllGather|ReduceScatter|Reduce|Broadcast|Bcast|Send|Recv|AlltoAll"
                              r"|AllToAll|Gather|Scatter)\b")


def _intent(name: str) -> bool:
    return name == "record_param_comms" or name.startswith("nccl:") or \
        (name.startswith("c10d::") and "wait" not in name) or _NCCL_COLLECTIVE.match(name) is not None


def _comm_like(name: str) -> bool:
    return bool(_LOWER_COMM.search(name.lower()) if name.isascii() else LOOKS_LIKE_COMM.search(name))


# Ranks of one run share their kernel and operator names: each is tested once per process, not once per rank.
_looks_like_comm = remembered(_comm_like)
_is_intent = remembered(_intent)


def analyze(ctx: RankContext) -> list[Finding]:
    trace, sets, th = ctx.trace, ctx.sets, ctx.thresholds
    meta = trace.meta
    host, ops = trace.host_ops, trace.device_ops
    gloo = meta.backend == "gloo" or (host["comm_kind"] == "gloo").any()
    if sets.mode != "gpu" or meta.world_size == 1 or gloo:
        return []
    on = ops["device"] == sets.device
    kind = ops["kind"]
    look = on & isin(kind, ("compute",)) & mask(ops["name"], _looks_like_comm)
    if sets.comm[0].size and not look.any():
        return []           # communication ran on the device and nothing else looks like it: neither verdict
    intent = mask(host["name"], _is_intent)
    rows = np.flatnonzero(intent)
    outer = rows[nearest_ancestor(host["parent"], rows, intent, include_self=False) < 0]
    is_comm = isin(kind, ("comm",))
    scope = _outermost(host["parent"], ops["launch_idx"], intent)
    linked = on & (scope >= 0) & ~is_comm & ~isin(kind, ("sync",))
    no_comm = sets.comm[0].size == 0 and outer.size > 0
    dur = ops["end_ns"] - ops["start_ns"]
    steps = ctx.steps
    span = sum(st.duration_ns for st in steps)
    per_step = int(dur[look].sum()) // max(len(steps), 1)
    worth = look.any() and (outer.size > 0 or (meta.world_size or 0) > 1) and \
        material(th, per_step, span // max(len(steps), 1))
    if not (no_comm or worth):
        return []
    with_comm = distinct(scope[on & is_comm & (scope >= 0)])
    names = Lookup(host["name"])
    lonely = outer[~np.isin(outer, with_comm)]
    scopes = _counts([names[int(i)] for i in lonely.tolist()])
    look_list, linked_list = _by_name(ops, look, dur), _by_name(ops, linked, dur)
    source = look_list or [k for k in linked_list if k["kind"] == "compute"]
    return [Finding(
        id="hidden-comm", severity="warning", rank=meta.rank, step=None,
        verdict="no-comm-kernel" if no_comm else "look-alike",
        evidence={"scopes": int(outer.size), "scopes_without_comm": int(lonely.size), "scope_names": scopes,
                  "world_size": meta.world_size, "backend": meta.backend, "comm_ns": int(sum(st.comm_ns for st in steps)),
                  "launched": linked_list, "look_alike": look_list, "look_alike_ns": int(dur[look].sum()),
                  "comm_pattern": _pattern([k["name"] for k in source]), "impact_ns": per_step,
                  "material": bool(worth)})]


def _outermost(parent: np.ndarray, launch: np.ndarray, intent: np.ndarray) -> np.ndarray:
    """Per device row, the outermost collective scope around its launch, -1 if none."""
    found = nearest_ancestor(parent, launch, intent, include_self=False)
    cur = found
    for _ in range(16):                        # c10d::op_ > record_param_comms > nccl:op: a few levels
        up = nearest_ancestor(parent, cur, intent, include_self=False)
        more = up >= 0
        if not more.any():
            break
        found = np.where(more, up, found)
        cur = np.where(more, up, -1)
    return found


def _counts(names: list[str]) -> list[dict]:
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[:_LISTED]
    return [{"name": n, "count": c} for n, c in top]


def _by_name(ops, rows: np.ndarray, dur: np.ndarray) -> list[dict]:
    """The selected device rows grouped by name: kind, count and total time, longest first."""
    sel = np.flatnonzero(rows)
    if sel.size == 0:
        return []
    cat = categorical_of(ops["name"])
    codes = cat.codes[sel].astype(np.int64) if cat is not None else \
        np.unique(ops["name"][sel].astype(str), return_inverse=True)[1].reshape(-1)
    used, first, inv = np.unique(codes, return_index=True, return_inverse=True)
    time = np.bincount(inv.reshape(-1), weights=dur[sel]).round().astype(np.int64)
    count = np.bincount(inv.reshape(-1))
    names, kinds = Lookup(ops["name"]), Lookup(ops["kind"])
    order = np.lexsort((used, -time))[:_LISTED]
    return [{"name": names[int(sel[first[i]])], "kind": kinds[int(sel[first[i]])], "count": int(count[i]),
             "time_ns": int(time[i])} for i in order.tolist()]


def base_name(name: str) -> str:
    """A kernel's name without ``void``, template arguments and parameters: ``flux::gemm_rs_kernel``."""
    return name.removeprefix("void ").split("(")[0].split("<")[0].strip()


def _pattern(names: list[str]) -> str | None:
    """A ``--comm-pattern`` regular expression matching these kernels' base names, None without any."""
    bases = list(dict.fromkeys(b for b in map(base_name, names) if b))
    return "|".join(re.escape(b) for b in bases) or None
