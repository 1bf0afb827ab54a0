"""The views across ranks show the Report's ``cross_rank`` and ``transport`` numbers. The sections are read by
attribute (the contract's CrossRank / Transport structs); here they are hand-made with the numbers of the
synthetic two-host run (4 ranks, rank 3 on the second host 1 ms late at each of 12 all-reduces of 26,214,400
bytes: ranks 0-2 wait 16.5 ms in all, 4.5 ms of it exposed; each transfer 1 ms)."""

from __future__ import annotations

from types import SimpleNamespace as NS

import pytest

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")

from tracelens.renderers import across_ranks  # noqa: E402

MS = 1_000_000


def cross_rank(n_collectives: int = 12) -> NS:
    ranks = [NS(rank=r, host="node1" if r == 3 else "node0", clock_offset_ns=0, clock_spread_ns=0,
                clock_corrected=True, matched=12, wait_ns=0 if r == 3 else 16_500_000,
                transfer_ns=12 * MS, exposed_wait_ns=0 if r == 3 else 4_500_000, late_count=12 if r == 3 else 0)
             for r in (2, 0, 3, 1)]
    colls = [NS(pg="0", seq=k, step=2 + k // 4, op="all_reduce", bytes=26_214_400, group_size=4, ranks=[0, 1, 2, 3],
                last_rank=3, arrival_skew_ns=MS, transfer_ns=MS, wait_ns=3 * MS, algbw_gbps=26.2144,
                busbw_gbps=39.3216) for k in range(n_collectives)]
    return NS(reference_rank=0, ranks=ranks, collectives=colls, bandwidth=[], matching=None)


def report(transport=None) -> NS:
    return NS(cross_rank=cross_rank(), transport=transport)


def test_without_the_sections_there_is_no_view():
    bare = NS(ranks=[], collectives=[])               # a Report of a version before cross_rank
    assert across_ranks.wait_rows(bare) is None and across_ranks.wait_transfer(bare) is None
    assert across_ranks.busbw(bare) is None and across_ranks.transport_line(bare) is None
    assert across_ranks.straggler_rows(NS(cross_rank=None)) is None


def test_wait_and_transfer_bars_are_the_ranks_numbers():
    fig = across_ranks.wait_transfer(report())
    got = {t.name: dict(zip(t.x, t.y)) for t in fig.data}
    assert got["wait for peers"] == {"0": 16.5, "1": 16.5, "2": 16.5, "3": 0.0}
    assert got["transfer"]["3"] == 12.0 and got["exposed wait"]["1"] == 4.5
    assert fig.layout.yaxis.title.text == "time (ms)"


def test_the_late_rank_leads_the_stragglers():
    rows = across_ranks.straggler_rows(report())
    assert [r["rank"] for r in rows] == [3, 0, 1, 2]
    assert rows[0]["late_count"] == 12 and rows[1]["wait_ms"] == 16.5


def test_many_ranks_show_those_that_waited_most():
    cr = cross_rank()
    cr.ranks = [NS(rank=r, host=None, clock_offset_ns=0, clock_spread_ns=0, clock_corrected=True, matched=1,
                   wait_ns=r * 1000, transfer_ns=MS, exposed_wait_ns=0, late_count=0) for r in range(100)]
    fig = across_ranks.wait_transfer(NS(cross_rank=cr, transport=None))
    wait = next(t for t in fig.data if t.name == "wait for peers")
    assert list(wait.x) == [str(r) for r in range(99, 99 - across_ranks.WORST, -1)]


def test_busbw_points_and_the_transport_verdict():
    bw = NS(source="cross-rank", collectives=12, busbw_gbps_p10=39.3, busbw_gbps_p50=39.3216, busbw_gbps_p90=39.4,
            range="rdma", tcp_max_gbps=3.0, rdma_min_gbps=10.0)
    rep = report(NS(verdict="rdma_gdr", severity="info", bandwidth=bw))
    fig = across_ranks.busbw(rep)
    (points,) = fig.data
    assert list(points.y) == [39.3216] * 12 and list(points.x) == [26_214_400] * 12
    assert fig.layout.xaxis.type == "log" and fig.layout.yaxis.title.text == "busbw (GB/s)"
    assert "NCCL transport: rdma_gdr (info)" in fig.layout.title.text
    assert sorted(s.y0 for s in fig.layout.shapes) == [3.0, 10.0]


def test_dashboard_section_appears_with_the_sections_only():
    pytest.importorskip("dash_ag_grid", reason="the dashboard extra (dash-ag-grid) is not installed")
    from tracelens.dashboards import layout

    assert layout.across_section(NS(cross_rank=None, transport=None)).children is None
    div = layout.across_section(report(NS(verdict="tcp_silent_fallback", severity="critical", bandwidth=None)))
    ids = [getattr(c, "id", None) for c in div.children]
    assert ids[1:] == ["transport", "wait-transfer", "stragglers", "busbw"]
    assert div.children[1].children == "NCCL transport: tcp_silent_fallback (critical)"
    assert [r["rank"] for r in div.children[3].rowData] == [3, 0, 1, 2]


def strip_report(n_collectives: int = 12) -> NS:
    """The two-host run with member times: instance k starts at k x 10 ms on ranks 0-2 and 1 ms later on rank 3
    (the late rank); all end together 2 ms after the first start, so ranks 0-2 wait 1 ms and every rank moves
    data for the 1 ms transfer."""
    cr = cross_rank(n_collectives)
    for k, c in enumerate(cr.collectives):
        c.starts_ns = [10 * MS * k + (MS if r == 3 else 0) for r in c.ranks]
        c.ends_ns = [10 * MS * k + 2 * MS] * 4
    return NS(cross_rank=cr, transport=None)


def _segments(trace) -> list[tuple]:
    """(rank, x0, x1) of each line segment of a strip trace (points separated by None)."""
    xs, ys = list(trace.x), list(trace.y)
    return [(ys[i], xs[i], xs[i + 1]) for i in range(0, len(xs), 3)]


def test_strip_parts_are_the_reports_member_times():
    rep = strip_report()
    assert across_ranks.strip_steps(rep) == [2, 3, 4]          # 12 instances, 4 per step from step 2
    fig = across_ranks.strip(rep, step=3)
    parts = {t.name: _segments(t) for t in fig.data if t.mode == "lines"}
    # Step 3 holds instances 4-7; times in ms from the first start shown (instance 4's, at 40 ms).
    assert sorted(parts["wait for peers"]) == sorted(
        (r, 10.0 * k, 10.0 * k + 1.0) for k in range(4) for r in (0, 1, 2))
    assert sorted(parts["transfer"]) == sorted(
        (r, 10.0 * k + 1.0, 10.0 * k + 2.0) for k in range(4) for r in range(4))
    last = next(t for t in fig.data if t.name == "arrived last")
    assert list(last.y) == [3] * 4 and list(last.x) == [1.0, 11.0, 21.0, 31.0]
    assert "4 matched instances" in fig.layout.title.text and fig.layout.xaxis.title.text.endswith("(ms)")


def test_strip_rows_split_wait_from_transfer():
    rows = across_ranks.strip_rows(strip_report(1))
    # Report: transfer 1 ms, so the wait of each member ends 1 ms before its end (2 ms).
    assert [(r["rank"], r["start"], r["wait_end"], r["end"], r["last"]) for r in rows] == [
        (0, 0, MS, 2 * MS, False), (1, 0, MS, 2 * MS, False), (2, 0, MS, 2 * MS, False),
        (3, MS, MS, 2 * MS, True)]


def test_strip_merges_below_a_pixel_past_the_shape_limit():
    rep = strip_report()
    fig = across_ranks.strip(rep, max_shapes=10)       # 12 x 4 members x 2 parts: far past 10
    transfer = next(t for t in fig.data if t.name == "transfer")
    # 120 ms shown over 2,000 pixels: a pixel is 0.06 ms; the 8 ms gaps between instances stay, so each rank
    # keeps its 12 transfers as they were.
    assert len(_segments(transfer)) == 48 and "merged" in fig.layout.title.text
    dense = strip_report(1_200)
    for k, c in enumerate(dense.cross_rank.collectives):    # back to back: one every 2 ms
        c.starts_ns = [2 * MS * k + (MS if r == 3 else 0) for r in c.ranks]
        c.ends_ns = [2 * MS * k + 2 * MS] * 4
    fig = across_ranks.strip(dense, max_shapes=1_000)
    transfer = next(t for t in fig.data if t.name == "transfer")
    # 2,400 ms over 2,000 pixels: a pixel is 1.2 ms, the 1 ms gaps between transfers fall under it, so each
    # rank's 1,200 transfers become one stretch from 1 ms to 2,400 ms.
    assert sorted(_segments(transfer)) == [(r, 1.0, 2400.0) for r in range(4)]


def test_no_strip_without_member_times():
    assert across_ranks.strip(report()) is None and across_ranks.strip_steps(report()) is None
