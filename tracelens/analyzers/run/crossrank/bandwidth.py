"""Algorithm and bus bandwidth of matched instances, as nccl-tests defines them (docs/metrics.md,
"Bandwidth"): ``algbw = S / T`` over the transfer time T (not the raw duration, which includes waiting),
``busbw = algbw x factor(op, n)``. Bytes per ns are GB/s (1 GB = 1e9 B)."""

from __future__ import annotations

import numpy as np

from ....model.columns import median, percentile
from ....contract import BandwidthRow

# busbw factor per canonical op, as a function of the group size n (nccl-tests src/<coll>.cu, *GetBw).
_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send_recv": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}
# Message-size buckets (bytes): a lower edge each; the first upper edge is bandwidth_min_bytes by default.
_EDGES = (0, 1 << 20, 16 << 20, 256 << 20)


def factor(op: str | None, n: int) -> float | None:
    f = _FACTORS.get(op or "")
    return None if f is None or n < 1 else f(n)


def per_instance(ops: list, size: np.ndarray, group: np.ndarray, transfer: np.ndarray) -> tuple[list, list]:
    """algbw and busbw (GB/s, None when unknown) per instance."""
    known = (size >= 0) & (transfer > 0)
    alg = np.where(known, size / np.maximum(transfer, 1), np.nan)
    algbw, busbw = [], []
    for op, n, a in zip(ops, group.tolist(), alg.tolist()):
        if a != a:                               # NaN: unknown size or zero transfer
            algbw.append(None)
            busbw.append(None)
            continue
        f = factor(op, n)
        algbw.append(a)
        busbw.append(None if f is None else a * f)
    return algbw, busbw


def size_buckets(size: np.ndarray, min_bytes: int) -> tuple[list[int], np.ndarray]:
    """The message-size buckets' lower edges (the first upper one ``min_bytes``: below it, latency-bound) and
    each size's bucket (an index into them; -1 for an unknown size)."""
    edges = sorted(set(_EDGES[:1] + (min_bytes,) + tuple(e for e in _EDGES[1:] if e > min_bytes)))
    k = np.searchsorted(edges, np.asarray(size, dtype=np.int64), side="right") - 1
    return edges, np.where(np.asarray(size) < 0, -1, k).astype(np.int64)


def summary(ops: list, size: np.ndarray, group: np.ndarray, algbw: list, busbw: list,
            min_bytes: int) -> list[BandwidthRow]:
    """One row per (op, size bucket, group size) of the instances with a known size."""
    edges, bucket = size_buckets(size, min_bytes)
    rows: dict[tuple, list[int]] = {}
    sizes = size.tolist()
    for i, (op, b, n, k) in enumerate(zip(ops, sizes, group.tolist(), bucket.tolist())):
        if b < 0:
            continue
        rows.setdefault((op or "", n, k), []).append(i)
    out = []
    for (op, n, k), idx in sorted(rows.items()):
        alg = np.array([algbw[i] for i in idx if algbw[i] is not None])
        bus = np.array([busbw[i] for i in idx if busbw[i] is not None])
        pct = (lambda q: float(percentile(bus, q)) if len(bus) else None)
        out.append(BandwidthRow(
            op=op or None, group_size=n, min_bytes=edges[k], max_bytes=edges[k + 1] if k + 1 < len(edges) else None,
            smallest_bytes=min(sizes[i] for i in idx), largest_bytes=max(sizes[i] for i in idx),
            count=len(idx), latency_bound=edges[k] < min_bytes,
            algbw_p50_gbps=float(median(alg)) if len(alg) else None,
            busbw_p10_gbps=pct(10), busbw_p50_gbps=pct(50), busbw_p90_gbps=pct(90)))
    return out
