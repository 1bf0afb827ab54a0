"""The slow-link finding on hand-made collective tables (analyzers/run/crossrank/slow_links.py): a communicator
against its peers, those of the same op, size bucket and host layout (not the same group size), with enough
instances on both sides; the time it lost, by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tracelens.analyzers.run import crossrank
from tracelens.analyzers.seam import COMM_COLUMNS, RankAnalysis
from tracelens.analyzers.thresholds import Thresholds
from tracelens.contract import RankResult, Totals

MB = 1 << 20
MS = 1_000_000
SIZE = 32 * MB


def _analysis(rank: int, host: str | None, rows: list[dict]) -> RankAnalysis:
    cols = {c: [] for c in COMM_COLUMNS}
    for r in rows:
        row = dict(step=-1, op=r.get("op", "all_reduce"), dtype="Float", bytes=r.get("bytes", SIZE),
                   group_size=r["group_size"], pg_name=r["pg"], pg_desc=r["pg"] + "-name", seq=r["seq"],
                   start_ns=r["start"], end_ns=r["start"] + r["transfer"], exposed_ns=-1, stream=0, launch_ns=-1,
                   lead_ns=0, lead_compute_ns=0, lead_sync_ns=0, lead_launch_ns=0, lead_host_ns=0)
        for c in COMM_COLUMNS:
            cols[c].append(row[c])
    comm = {c: np.array(v, dtype=object if c in ("op", "dtype", "pg_name", "pg_desc") else np.int64)
            for c, v in cols.items()}
    totals = Totals(duration_ns=0, compute_ns=0, comm_ns=0, overlap_ns=0, exposed_comm_ns=0, idle_ns=0,
                    overlap_pct=None, exposed_comm_fraction=None)
    result = RankResult(rank=rank, world_size=None, device=None, device_name=None, mode="gpu", source=f"r{rank}",
                        steps=[], totals=totals)
    return RankAnalysis(rank=rank, source=f"r{rank}", inputs=[], result=result, collectives=[], comm=comm,
                        findings=[], warnings=[], host=host, from_logs=True)


def slow_links(comms: dict, hosts: list, th: Thresholds | None = None) -> list:
    """The slow-link findings of a run whose communicators are ``comms``: name -> (members, transfers ns: one
    instance each, and optionally its op and bytes); rank r on ``hosts[r]``. Every member arrives at once
    (no waits); each communicator's instances have a time window of their own."""
    rows: dict[int, list] = {r: [] for r in range(len(hosts))}
    for c, (name, spec) in enumerate(comms.items()):
        members, transfers = spec[0], spec[1]
        extra = spec[2] if len(spec) > 2 else {}
        for seq, t in enumerate(transfers):
            for r in members:
                rows[r].append(dict(pg=name, seq=seq, start=(c * 1000 + seq) * 100 * MS, transfer=t,
                                    group_size=len(members), **extra))
    ordered = [_analysis(r, hosts[r], rows[r]) for r in range(len(hosts))]
    out = crossrank.analyze(ordered, th or Thresholds())
    return [f for f in out.findings if f.id == "slow-link"]


# Four hosts of four ranks.
HOSTS = [f"node{r // 4}" for r in range(16)]


def test_peers_are_by_layout_not_group_size():
    # Eight ranks on hosts 0-1 and two ranks on hosts 2-3: both cross one host-to-host link, so they are peers
    # although their group sizes differ. busbw = S / T x 2(n-1)/n: 32 MiB / 1 ms x 14/8 for the eight,
    # 32 MiB / 7 ms x 1 for the two, a share of 1/7 / (14/8) = 4/49 < 0.5.
    eight, two = list(range(8)), [8, 12]
    found = slow_links({"big": (eight, [1 * MS] * 6), "small": (two, [7 * MS] * 6)}, HOSTS)
    (f,) = found
    ev = f.evidence
    assert (ev["comm"], ev["comm_name"], ev["layout"], ev["ranks"], ev["hosts"]) == \
        ("small", "small-name", "two-hosts", [8, 12], ["node2", "node3"])
    assert (f.rank, f.step, f.verdict, ev["instances"], ev["peer_instances"], ev["peer_comms"]) == \
        (8, None, None, 6, 6, 1)
    assert ev["share"] == pytest.approx(4 / 49, rel=1e-12)
    # lost = 6 instances x 7 ms x (1 - 4/49) = 42 ms x 45/49
    assert ev["lost_ns"] == round(6 * 7 * MS * 45 / 49) and ev["transfer_ns"] == 42 * MS
    assert ev["saving_ns"] is None and ev["saving_note"]
    # A communicator on one host (NVLink) is no peer of either, however fast it is: the two-host ones are not
    # slow beside it, and with the slow one gone the one left has no peers.
    nvlink = {"nvl": ([0, 1, 2, 3], [MS // 10] * 6)}
    assert slow_links({"big": (eight, [1 * MS] * 6), **nvlink}, HOSTS) == []
    assert [f.evidence["comm"] for f in slow_links({"big": (eight, [1 * MS] * 6), "small": (two, [7 * MS] * 6),
                                                   **nvlink}, HOSTS)] == ["small"]
    # Three or more hosts are a layout of their own: a communicator of hosts 0-2 is no peer of two-host ones.
    three = list(range(12))
    assert slow_links({"three": (three, [9 * MS] * 6), "big": (eight, [1 * MS] * 6)}, HOSTS) == []


def test_peers_need_the_same_op_and_size_bucket():
    eight, other = list(range(8)), list(range(8, 16))
    slow = (other, [4 * MS] * 6)
    assert slow_links({"a": (eight, [1 * MS] * 6), "b": slow}, HOSTS)
    assert slow_links({"a": (eight, [1 * MS] * 6, {"op": "all_gather"}), "b": slow}, HOSTS) == []
    # 32 MiB is in the 16-256 MiB bucket, 4 MiB in the 1-16 MiB one.
    assert slow_links({"a": (eight, [1 * MS] * 6, {"bytes": 4 * MB}), "b": slow}, HOSTS) == []
    # Below bandwidth_min_bytes, latency-bound: no bandwidth verdict at all.
    small = {"bytes": 64 << 10}
    assert slow_links({"a": (eight, [MS // 100] * 6, small), "b": (other, [MS] * 6, small)}, HOSTS) == []


@pytest.mark.parametrize("mine, theirs, found", [(5, 5, True), (4, 5, False), (5, 4, False), (20, 4, False)])
def test_both_sides_need_the_minimum_of_instances(mine, theirs, found):
    eight, other = list(range(8)), list(range(8, 16))
    got = slow_links({"a": (eight, [1 * MS] * theirs), "b": (other, [4 * MS] * mine)}, HOSTS)
    assert [f.evidence["comm"] for f in got] == (["b"] if found else [])
    assert all(f.evidence["min_instances"] == 5 for f in got)
    th = Thresholds().with_overrides(["slow_link_min_instances=4"])
    assert [f.evidence["comm"] for f in slow_links({"a": (eight, [1 * MS] * theirs),
                                                    "b": (other, [4 * MS] * mine)}, HOSTS, th)] == ["b"]


def test_the_share_must_be_below_the_threshold():
    # Same members' layout and group size: the share is the peers' transfer over its own. Exactly half is not
    # below half; a nanosecond more is.
    eight, other = list(range(8)), list(range(8, 16))
    assert slow_links({"a": (eight, [1 * MS] * 6), "b": (other, [2 * MS] * 6)}, HOSTS) == []
    (f,) = slow_links({"a": (eight, [1 * MS] * 6), "b": (other, [2 * MS + 1] * 6)}, HOSTS)
    assert f.evidence["share"] < 0.5 and f.evidence["max_share"] == 0.5
    # lost = 6 x (2 ms + 1) x (1 - 1 ms / (2 ms + 1)) = 6 x (1 ms + 1)
    assert f.evidence["lost_ns"] == 6 * (MS + 1)
    th = Thresholds().with_overrides(["slow_link_max_share=0.6"])
    assert [f.evidence["comm"] for f in slow_links({"a": (eight, [1 * MS] * 6), "b": (other, [2 * MS] * 6)},
                                                   HOSTS, th)] == ["b"]


def test_the_peers_median_and_a_net_time_lost():
    # Three peers at 1, 1 and 1.5 ms: their median transfer is 1 ms. The slow one's instances take 3, 4 and 5 ms
    # (median 4 ms, a share of 1/4); it lost 3 x (1 - 1/3) + 4 x (1 - 1/4) + 5 x (1 - 1/5) ms = 2 + 3 + 4 ms.
    hosts = [f"node{r // 2}" for r in range(8)]
    comms = {"p0": ([0, 2], [1 * MS] * 5), "p1": ([1, 3], [1 * MS] * 5), "p2": ([4, 6], [3 * MS // 2] * 5),
             "slow": ([5, 7], [3 * MS, 4 * MS, 5 * MS, 4 * MS, 4 * MS])}
    (f,) = slow_links(comms, hosts)
    ev = f.evidence
    assert ev["comm"] == "slow" and ev["share"] == pytest.approx(0.25, rel=1e-12)
    assert (ev["peer_comms"], ev["peers_listed"], ev["peer_instances"]) == (3, ["p0", "p1", "p2"], 15)
    assert ev["lost_ns"] == (2 + 3 + 4 + 3 + 3) * MS
    assert f.severity == "warning"


def test_one_communicator_has_no_peers():
    assert slow_links({"only": (list(range(8)), [9 * MS] * 20)}, HOSTS) == []
    # Nor do two whose layouts differ.
    assert slow_links({"a": (list(range(8)), [1 * MS] * 20), "b": (list(range(12)), [9 * MS] * 20)}, HOSTS) == []


def test_instances_without_a_busbw_are_not_counted():
    eight, other = list(range(8)), list(range(8, 16))
    # An op without nccl-tests' factor has no busbw: no verdict.
    custom = {"op": "custom_op"}
    assert slow_links({"a": (eight, [1 * MS] * 6, custom), "b": (other, [4 * MS] * 6, custom)}, HOSTS) == []
    # A zero transfer has none either: two of the slow one's six leave four, fewer than five.
    assert slow_links({"a": (eight, [1 * MS] * 6), "b": (other, [4 * MS] * 4 + [0, 0])}, HOSTS) == []
    assert slow_links({"a": (eight, [1 * MS] * 6), "b": (other, [4 * MS] * 5 + [0])}, HOSTS)


def test_a_member_of_unknown_host_has_no_layout():
    hosts = HOSTS[:8] + [None] + HOSTS[9:]
    assert slow_links({"a": (list(range(8)), [1 * MS] * 6), "b": ([8, 12], [7 * MS] * 6)}, hosts) == []
