"""Inter-node bus bandwidth for the transport verdict: per-collective rows, and where they fall against the
TCP and RDMA ranges (thresholds ``transport_*``; docs/metrics.md, "Network transport").

A row is ``(op, bytes, group_size, busbw_gbps, inter_node)``, ``inter_node`` True, False or None (unknown).
:func:`rows_from_comm` makes them from the ranks' collective tables until the cross-rank analysis supplies
transfer-time rows (``Report.cross_rank.bandwidth``); :func:`check` reads rows from either.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple

import numpy as np

from ...model.columns import percentile
from ...contract import BandwidthCheck
from ..seam import RankAnalysis
from ..thresholds import Thresholds
from .crossrank.bandwidth import factor


class Row(NamedTuple):
    op: str | None
    bytes: int
    group_size: int
    busbw_gbps: float
    inter_node: bool | None


def busbw_gbps(op: str | None, size: int, group: int, dur_ns: int) -> float | None:
    """Bus bandwidth in GB/s (1 GB = 1e9 B) of one collective, with the nccl-tests factor of the cross-rank
    bandwidth; None when it cannot be measured."""
    f = factor(op, group)
    if f is None or size <= 0 or group < 2 or dur_ns <= 0:
        return None
    return size / dur_ns * f          # bytes per ns = GB/s


def rows_from_comm(analyses: Iterable[RankAnalysis], min_bytes: int) -> list[Row]:
    """Rows from the ranks' collective tables: one per collective instance of at least ``min_bytes``, its
    time the shortest of the ranks' durations of the same instance (process group and sequence number), so
    that waiting for a late rank is not counted as transfer time; an instance without a sequence number
    keeps its own duration. Whether it crossed nodes is left unknown (see :func:`placed`)."""
    best: dict[tuple, list] = {}
    for a in analyses:
        c = a.comm
        if not len(c.get("bytes", ())):
            continue
        dur = c["end_ns"] - c["start_ns"]
        keep = np.flatnonzero((c["bytes"] >= min_bytes) & (c["group_size"] >= 2) & (dur > 0))
        for i in keep.tolist():
            seq = int(c["seq"][i])
            key = (c["pg_name"][i], seq, c["op"][i]) if seq >= 0 else (a.rank, i)
            d = int(dur[i])
            if key not in best or d < best[key][3]:
                best[key] = [c["op"][i], int(c["bytes"][i]), int(c["group_size"][i]), d]
    rows = []
    for op, size, group, d in best.values():
        bw = busbw_gbps(op, size, group, d)
        if bw is None:
            continue
        rows.append(Row(op, size, group, bw, None))
    return rows


def placed(rows: list[Row], multi_node: bool | None, local_ranks: int | None) -> list[Row]:
    """Rows whose ``inter_node`` is unknown, decided from the run: a collective crosses nodes when the run
    spans nodes and its group is larger than the ranks of one node (any group when that is unknown)."""
    if multi_node is None:
        return rows
    return [r if r.inter_node is not None else
            r._replace(inter_node=bool(multi_node and (local_ranks is None or r.group_size > local_ranks)))
            for r in rows]


def check(rows: list[Row], th: Thresholds, source: str = "comm-table") -> BandwidthCheck | None:
    """Where the inter-node rows' median busbw falls; None without inter-node rows of a measurable size."""
    bw = np.array([r.busbw_gbps for r in rows if r.inter_node and r.bytes >= th.transport_min_bytes], dtype=float)
    if not len(bw):
        return None
    p10, p50, p90 = (round(float(v), 3) for v in percentile(bw, [10, 50, 90]))
    where = "tcp" if p50 < th.transport_tcp_max_busbw_gbps else \
        "rdma" if p50 > th.transport_rdma_min_busbw_gbps else "ambiguous"
    return BandwidthCheck(source=source, collectives=len(bw), busbw_gbps_p10=p10, busbw_gbps_p50=p50,
                          busbw_gbps_p90=p90, range=where, tcp_max_gbps=th.transport_tcp_max_busbw_gbps,
                          rdma_min_gbps=th.transport_rdma_min_busbw_gbps)
