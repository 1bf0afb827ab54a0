"""Which device activity is communication, and which collective it belongs to.

The rules are a table (:data:`DEFAULT_RULES`) that a user can extend with ``--comm-pattern REGEX``.
Signals are applied in this order and the one that fired is recorded in ``device_ops.rule``:

1. ``collective-args``: the kernel carries collective metadata (``Collective name``) copied by Kineto.
2. name rules from the table (NCCL/RCCL families, userbuffers, custom all-reduce, DeepEP, user patterns).
3. ``comm-scope``: a kernel launched inside a ``record_param_comms``, ``nccl:*`` or ``c10d::*`` CPU scope.
4. ``ce-copy``: a peer-to-peer or cross-device memory copy (copy-engine collectives); ``ce-copy-scope``: a
   device-to-device copy launched inside such a CPU scope (NCCL 2.28+ copy-engine collectives copy between
   peer-mapped buffers, which the profiler records as same-device DtoD).

Memcpy, memset and sync activities that no rule claims keep their own kind; they are never compute.
Background and sources: shared reference ``comm-kernels.md``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable

import numpy as np

from .columns import categorical_of, factorize, remembered


@dataclass(frozen=True)
class CommRule:
    rule: str
    pattern: str
    comm_kind: str
    exclude: str | None = None

    def compiled(self) -> tuple[re.Pattern, re.Pattern | None]:
        return re.compile(self.pattern), re.compile(self.exclude) if self.exclude else None


DEFAULT_RULES: tuple[CommRule, ...] = (
    CommRule("rccl-name", r"rcclGenericKernel|ncclDevKernel_Generic", "rccl"),
    CommRule("nccl-name", r"^(?:void )?(?:nccl|rccl)|ncclDevKernel|ncclKernel|ncclSymk?DevKernel", "nccl"),
    CommRule("userbuffers-name", r"userbuffers_|kuserbuffers_", "userbuffers"),
    CommRule("custom-allreduce-name",
             r"cross_device_reduce|all_reduce_kernel|allreduce_fusion|multimem_all_|oneShotAllReduce|twoShotAllReduce",
             "custom_ar"),
    CommRule("deepep-name", r"deep_ep::|::ep::|nccl_ep::", "deepep", exclude=r"get_dispatch_layout"),
)


def user_rules(patterns: list[str] | tuple[str, ...]) -> tuple[CommRule, ...]:
    """Rules for ``--comm-pattern`` values; raises ValueError naming a pattern that does not compile."""
    rules = []
    for p in patterns:
        try:
            re.compile(p)
        except re.error as exc:
            raise ValueError(f"--comm-pattern {p!r} is not a valid regular expression: {exc}") from None
        rules.append(CommRule("user-pattern", p, "user"))
    return tuple(rules)


def match_names(names, rules: tuple[CommRule, ...]) -> tuple[np.ndarray, np.ndarray]:
    """(comm_kind, rule) per name, None where no name rule matches; each distinct name is matched once."""
    cat = categorical_of(names)
    if cat is not None:                                   # code -1 (missing) reads the appended None
        codes, uniques = cat.codes, cat.categories.tolist() + [None]
    else:
        codes, uniques = factorize(np.asarray(names, dtype=object))
        uniques = uniques + [None]              # code -1 (None) reads the appended None
    kinds = np.full(len(uniques), None, dtype=object)
    fired = np.full(len(uniques), None, dtype=object)
    seen = _matched(rules)
    for j, name in enumerate(uniques):
        if isinstance(name, str):
            kinds[j], fired[j] = seen(name)
    return kinds[codes], fired[codes]


_MATCHERS: dict[tuple[CommRule, ...], Callable[[str], tuple[str | None, str | None]]] = {}


def _matched(rules: tuple[CommRule, ...]) -> Callable[[str], tuple[str | None, str | None]]:
    """(comm_kind, rule) of a name under ``rules``, None where none fires; remembered per rule set and name
    for the process, since the ranks of a run share their kernel names."""
    found = _MATCHERS.get(rules)
    if found is None:
        compiled = [(r, *r.compiled()) for r in rules]

        def match(name: str) -> tuple[str | None, str | None]:
            for rule, pat, excl in compiled:
                if pat.search(name) and not (excl and excl.search(name)):
                    return rule.comm_kind, rule.rule
            return None, None
        if len(_MATCHERS) >= 16:        # a long-lived process given many --comm-pattern sets
            _MATCHERS.clear()
        found = _MATCHERS[rules] = remembered(match)
    return found


_COLL_IN_NAME = re.compile(r"(AllReduce|AllGather|ReduceScatter|Broadcast|Reduce|SendRecv|AllToAll)")
_STRIP = ("intotensor", "coalesced", "tensor", "base", "single")
_CANON = {
    "allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
    "alltoall": "all_to_all", "alltoallv": "all_to_all", "sendrecv": "send_recv", "send": "send",
    "recv": "recv", "broadcast": "broadcast", "reduce": "reduce", "barrier": "barrier",
    "gather": "gather", "scatter": "scatter", "coalesced": "coalesced", "wait": "wait",
}


def canonical_op(name: str | None) -> str | None:
    """A collective's canonical name from ``Collective name`` or an ``nccl:*``/``gloo:*`` scope name.

    >>> canonical_op("_allgather_base"), canonical_op("nccl:_reduce_scatter_base")
    ('all_gather', 'reduce_scatter')
    """
    if not name:
        return None
    raw = name.split(":", 1)[-1]
    key = re.sub(r"[^a-z]", "", raw.lower())
    if key in _CANON:
        return _CANON[key]
    for suffix in _STRIP:
        key = key.replace(suffix, "")
    return _CANON.get(key, raw.strip("_").lower() or None)


def kernel_op(name: str | None) -> str | None:
    """The collective named inside an NCCL/RCCL kernel name, None for generic kernels.

    >>> kernel_op("ncclDevKernel_AllReduce_Sum_f32_RING_LL"), kernel_op("rcclGenericKernel<1, false>")
    ('all_reduce', None)
    """
    m = _COLL_IN_NAME.search(name or "")
    return _CANON[m.group(1).lower()] if m else None


_DTYPE_BYTES = {
    "float": 4, "float32": 4, "double": 8, "float64": 8, "half": 2, "float16": 2, "bfloat16": 2,
    "int": 4, "int32": 4, "long": 8, "longint": 8, "int64": 8, "short": 2, "shortint": 2, "int16": 2,
    "byte": 1, "unsignedchar": 1, "uint8": 1, "char": 1, "signedchar": 1, "int8": 1, "bool": 1,
    "float8e4m3fn": 1, "float8e5m2": 1, "float8e4m3fnuz": 1, "float8e5m2fnuz": 1,
    "complexfloat": 8, "complexdouble": 16,
}


def dtype_size(dtype: str | None) -> int | None:
    """Bytes per element for a profiler dtype string (``Float``, ``c10::BFloat16``, ``long int``)."""
    if not dtype:
        return None
    key = re.sub(r"[^a-z0-9]", "", dtype.lower().replace("c10::", ""))
    return _DTYPE_BYTES.get(key)


def message_bytes(op: str | None, nelems_in: int, nelems_out: int, elem: int | None, group: int) -> int:
    """Message size S as nccl-tests defines it (all-gather counts the full output), -1 if unknown."""
    if elem is None:
        return -1
    if op == "all_gather":
        if nelems_out >= 0:
            return nelems_out * elem
        return nelems_in * elem * group if nelems_in >= 0 and group > 0 else -1
    if nelems_in >= 0:
        return nelems_in * elem
    return nelems_out * elem if nelems_out >= 0 else -1
