"""The slow link: a communicator whose bus bandwidth is well below its peers' (docs/metrics.md, "Slow links").

A communicator's instances are compared with its peers': the instances of the other communicators of the same
op, the same message-size bucket (bandwidth.size_buckets; the latency-bound ones below bandwidth_min_bytes are
left out) and the same layout, how its members spread over hosts: all on one host (NVLink and the like), on
two (one host-to-host link) or on three or more (many links). Not the same group size: eight ranks on two
hosts cross one link as four do, and their busbw (nccl-tests' factor of n) is comparable. A communicator whose
median busbw is below slow_link_max_share of its peers' median is a slow link, where it and its peers have
slow_link_min_instances instances with a busbw each at least (fewer: no verdict).

The time it lost is, over its instances, what each transfer T took beyond the same bytes at its peers' median
busbw B: sum of T x (1 - busbw / B), net (an instance faster than its peers counts against it). What mending
the link would save per step is unknown: the lever (a NIC, a cable, a switch port, the transport in use) is
outside the job, and how much of the time lost a step would give back is in neither the traces nor the logs.
"""

from __future__ import annotations

import numpy as np

from ....model.columns import distinct, median as median_of
from ...thresholds import Thresholds
from ...wording import Finding
from ..outliers import group_median
from .bandwidth import size_buckets

LAYOUTS = ("one-host", "two-hosts", "many-hosts")
SAVING_NOTE = ("the lever is outside the job (a NIC, a cable or a switch port of these hosts, or the transport "
               "NCCL chose between them), and how much of the time lost a step would give back is in neither the "
               "traces nor the logs")


def find(mt) -> list[Finding]:
    """One ``slow-link`` finding per communicator, op and size bucket whose busbw is well below its peers'
    (``mt``: the crossrank ``Matched`` value)."""
    th: Thresholds = mt.th
    m, tab = mt.m, mt.tab
    n_inst = len(m.starts)
    if not n_inst:
        return []
    comm = np.asarray(tab.cols["pg_name"][mt.first], dtype=np.int64)
    op = np.asarray(tab.cols["op"][mt.first], dtype=np.int64)
    _, bucket = size_buckets(mt.size, th.bandwidth_min_bytes)
    busbw = np.array([np.nan if b is None else b for b in mt.busbw], dtype=np.float64)
    layout, members = _layouts(mt, comm)
    use = (comm >= 0) & (op >= 0) & (mt.size >= th.bandwidth_min_bytes) & np.isfinite(busbw) & (layout >= 0)
    if not use.any():
        return []
    idx = np.flatnonzero(use)
    # Peers: the same op, size bucket and layout; within that class, one group per communicator.
    cls = np.unique(np.stack([op[idx], bucket[idx], layout[idx]]), axis=1, return_inverse=True)[1].reshape(-1)
    own = np.unique(np.stack([cls, comm[idx]]), axis=1, return_inverse=True)[1].reshape(-1)
    n_own = int(own.max()) + 1
    count = np.bincount(own, minlength=n_own)
    median = group_median(busbw[idx], own, n_own)
    found = []
    for c in range(int(cls.max()) + 1):
        inside = np.flatnonzero(cls == c)
        values = np.sort(busbw[idx[inside]])
        for g in distinct(own[inside]).tolist():
            k = int(count[g])
            if k < th.slow_link_min_instances or inside.size - k < th.slow_link_min_instances:
                continue
            # Without the communicator's own instances, the peers' median is at most this (k values taken out of
            # the sorted class shift its upper median up by k places at most): most communicators are no
            # candidate, and their peers' median is never computed.
            bound = values[min(values.size - 1, (values.size - k) // 2 + k)]
            if not median[g] < th.slow_link_max_share * bound:
                continue
            peers = inside[own[inside] != g]
            peer_median = float(median_of(busbw[idx[peers]]))
            if not median[g] < th.slow_link_max_share * peer_median:
                continue
            mine = idx[inside[own[inside] == g]]
            found.append(_finding(mt, mine, idx[peers], comm, members, layout, busbw, float(median[g]),
                                  peer_median, th))
    return found


def _layouts(mt, comm: np.ndarray) -> tuple[np.ndarray, dict]:
    """Per instance its communicator's layout (an index into LAYOUTS; -1: a member's host unknown), and per
    communicator code the positions of its members (its first instance's)."""
    hosts = [a.host for a in mt.ordered]
    code: dict = {}
    host_code = np.array([-1 if h is None else code.setdefault(h, len(code)) for h in hosts], dtype=np.int64)
    bounds = np.append(mt.m.starts, len(mt.m.rows))
    of_code = np.full(int(comm.max(initial=-1)) + 2, -1, dtype=np.int64)      # the last one: code -1's
    members = {}
    codes, first = np.unique(comm, return_index=True)
    for g, i in zip(codes.tolist(), first.tolist()):
        if g < 0:
            continue
        pos = mt.pos[bounds[i]:bounds[i + 1]]
        members[g] = pos
        h = host_code[pos]
        if (h >= 0).all():
            of_code[g] = min(len(distinct(h)), len(LAYOUTS)) - 1
    return of_code[comm], members


def _comm_name(mt, row: int) -> str | None:
    """The communicator's name (Inspector's comm_name, a trace's process-group description) at a table row."""
    a = mt.ordered[int(mt.tab.pos[row])]
    before = sum(len(x.comm["start_ns"]) for x in mt.ordered[:int(mt.tab.pos[row])])
    desc = a.comm.get("pg_desc")
    value = None if desc is None else desc[row - before]
    return None if value is None or value != value else str(value)


def _finding(mt, mine: np.ndarray, peers: np.ndarray, comm: np.ndarray, members: dict, layout: np.ndarray,
             busbw: np.ndarray, median: float, peer_median: float, th: Thresholds) -> Finding:
    names = mt.tab.names
    first = int(mine[0])
    g = int(comm[first])
    pos = members[g]
    ranks = mt.ranks[pos].tolist()
    hosts = sorted({mt.ordered[p].host for p in pos.tolist()})
    transfer = mt.w.transfer[mine].astype(np.float64)
    lost = int(round(float((transfer * (1.0 - busbw[mine] / peer_median)).sum())))
    size = mt.size[mine]
    peer_comms = sorted({str(names["pg_name"][k]) for k in distinct(comm[peers]).tolist()})
    evidence = {
        "comm": str(names["pg_name"][g]), "comm_name": _comm_name(mt, int(mt.m.rows[mt.m.starts[first]])),
        "op": names["op"][int(mt.tab.cols["op"][mt.first[first]])],
        "bytes_min": int(size.min()), "bytes_max": int(size.max()), "layout": LAYOUTS[int(layout[first])],
        "ranks": ranks, "hosts": hosts, "instances": int(mine.size),
        "busbw_gbps": median, "peers_busbw_gbps": peer_median, "share": median / peer_median,
        "peer_comms": len(peer_comms), "peers_listed": peer_comms[:10], "peer_instances": int(peers.size),
        "transfer_ns": int(round(float(transfer.sum()))), "lost_ns": lost,
        "max_share": th.slow_link_max_share, "min_instances": th.slow_link_min_instances,
        # What mending the link saves per step: unknown, as a cause's saving the trace cannot tell (Cause.saving_ns
        # null, saving_note why).
        "saving_ns": None, "saving_note": SAVING_NOTE}
    severity = "warning" if lost >= th.material_min_ns else "info"
    return Finding(id="slow-link", severity=severity, rank=min(ranks), step=None, verdict=None, evidence=evidence)
