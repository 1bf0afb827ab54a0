"""Configured versus observed: the settings a run recorded (its environment, its command line) beside what
the trace shows, and the contradictions between them (docs/metrics.md, "Configured and observed").

- ``bucket_cap_mb`` (command line): the data-parallel all-reduces (buckets) per step (the median over
  steps), and the largest. A
  contradiction when the largest bucket is more than twice the cap, or (sizes known) there are fewer than
  half the buckets the cap makes of the gradients.
- ``CUDA_DEVICE_MAX_CONNECTIONS``: the dimensions that communicate. Megatron's TP and CP overlap needs 1
  before Blackwell; FSDP and EP want more than one.
- ``NCCL_ALGO``, ``NCCL_PROTO``: the algorithms and protocols NCCL's kernel names show (``RING_LL``).
"""

from __future__ import annotations

import math
import re

import numpy as np

from ...contract import BucketModel, SettingCheck
from ..wording import Finding
from .context import RankContext

_KERNEL = re.compile(r"_(RING|TREE|COLLNET_DIRECT|COLLNET_CHAIN|COLLNET|NVLS_TREE|NVLS|PAT)_(LL128|LL|SIMPLE)\b",
                     re.IGNORECASE)
_BLACKWELL = re.compile(r"\bG?B[123]00\b|Blackwell|RTX 50\d0", re.IGNORECASE)
MIB = 1 << 20


def _allowed(value: str, seen: set[str]) -> bool:
    """Whether every algorithm/protocol seen is allowed by an NCCL_ALGO/NCCL_PROTO value (``Ring,Tree``,
    ``^NVLS`` excludes; an ``allreduce:ring;...`` per-collective form is not judged)."""
    if ":" in value:
        return True
    exclude = value.startswith("^")
    names = {v.strip().upper() for v in value.lstrip("^").split(",") if v.strip()}
    return not (seen & names) if exclude else seen <= names


def _buckets(cap: str, m: BucketModel | None, comm: dict, comm_dims) -> SettingCheck:
    sel = (comm_dims == "dp") & (comm["op"] == "all_reduce") & (comm["step"] >= 0)
    steps, counts = np.unique(comm["step"][sel], return_counts=True)
    sizes = comm["bytes"][sel]
    sizes_max = int(sizes.max()) if sizes.size and (sizes > 0).all() else None
    n = int(np.median(counts)) if counts.size else 0
    observed = "no data-parallel all-reduce" if not n else f"{n} bucket{'' if n == 1 else 's'} per step" + (
        "" if sizes_max is None else f", the largest {sizes_max / MIB:.2f} MiB")
    problem = None
    try:
        cap_bytes = float(cap) * MIB
    except ValueError:
        cap_bytes = None
    if m is not None and cap_bytes and cap_bytes > 0:
        if sizes_max is not None and sizes_max > 2 * cap_bytes:
            problem = "the largest bucket is more than twice the cap"
        elif m.gradient_bytes and m.first_bucket_bytes is not None:
            expect = 1 + math.ceil(max(m.gradient_bytes - m.first_bucket_bytes, 0) / cap_bytes)
            if m.buckets < expect / 2:
                problem = f"the cap makes {expect} buckets of these gradients"
    return SettingCheck(name="bucket_cap_mb", source="command line", configured=cap, observed=observed,
                        contradiction=problem)


def check(ctx: RankContext, dims: list[str], bucket: BucketModel | None, comm_dims) -> list[SettingCheck]:
    """The settings the rank recorded, each beside what its trace shows (``dims``: the rank's parallelism
    dimensions; ``comm_dims``: the dimension of each comm-table row)."""
    meta, device_name, comm = ctx.trace.meta, ctx.device_name, ctx.comm
    comm_names = list(dict.fromkeys(ctx.exposure["name"].tolist()))
    out = []
    if "bucket_cap_mb" in meta.command:
        out.append(_buckets(meta.command["bucket_cap_mb"], bucket, comm, comm_dims))
    conn = meta.env.get("CUDA_DEVICE_MAX_CONNECTIONS")
    if conn is not None:
        problem = None
        blackwell = bool(device_name and _BLACKWELL.search(device_name))
        if conn.strip() != "1" and not blackwell and ({"tp", "cp"} & set(dims)):
            problem = "tensor/context-parallel overlap needs 1 before Blackwell (kernels start in launch order)"
        elif conn.strip() == "1" and ({"fsdp", "ep"} & set(dims)):
            problem = "FSDP and expert-parallel overlap want more than one connection"
        shown = ", ".join(d for d in dims if d != "unknown") or "no attributed communication"
        out.append(SettingCheck(name="CUDA_DEVICE_MAX_CONNECTIONS", source="environment", configured=conn,
                                observed=f"communication: {shown}", contradiction=problem))
    # A kernel whose name the trace lost (a dropped "name") names no algorithm.
    found = [m.groups() for m in map(_KERNEL.search, (n for n in comm_names if isinstance(n, str))) if m]
    for name, at in (("NCCL_ALGO", 0), ("NCCL_PROTO", 1)):
        value = meta.env.get(name)
        if value is None:
            continue
        seen = {f[at].upper() for f in found}
        problem = None if not seen or _allowed(value, seen) else "the kernels ran other ones"
        out.append(SettingCheck(name=name, source="environment", configured=value,
                                observed=", ".join(sorted(seen)) if seen else "no NCCL kernel names it",
                                contradiction=problem))
    return out


def findings(ctx: RankContext, checks: list[SettingCheck]) -> list[Finding]:
    """A ``config-mismatch`` finding per setting the trace contradicts."""
    return [Finding(id="config-mismatch", severity="warning", rank=ctx.rank, step=None, verdict=None,
                    evidence={"setting": c.name, "source": c.source, "configured": c.configured,
                              "observed": c.observed, "contradiction": c.contradiction})
            for c in checks if c.contradiction]
