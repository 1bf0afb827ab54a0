"""The cross-rank tables of the text and Markdown reports: every rank up to 16, the ranks that waited most and
least and the distribution beyond, within 80 columns."""

from __future__ import annotations

import pytest

from tracelens.contract import BandwidthRow, CrossRank, Matching, RankAcross, Report, Summary
from tracelens.renderers import render


def report(n: int) -> Report:
    # Rank r waits r ms (so the most waiting are the highest ranks), hosts of 8 ranks, rank 5's offset not
    # applied.
    ranks = [RankAcross(rank=r, host=f"node{r // 8:04d}", clock_offset_ns=(r // 8) * 1_250_000,
                        clock_spread_ns=2_000, clock_corrected=r != 5, matched=1000, wait_ns=r * 1_000_000,
                        transfer_ns=900_000_000, exposed_wait_ns=r * 500_000, late_count=n - r)
             for r in range(n)]
    bw = [BandwidthRow(op="all_reduce", group_size=n, min_bytes=16 << 20, max_bytes=256 << 20, count=1000,
                       latency_bound=False, algbw_p50_gbps=120.5, busbw_p10_gbps=200.25, busbw_p50_gbps=230.5,
                       busbw_p90_gbps=241.0),
          BandwidthRow(op="all_gather", group_size=n, min_bytes=0, max_bytes=1 << 20, count=3,
                       latency_bound=True, algbw_p50_gbps=1.5, busbw_p10_gbps=1.0, busbw_p50_gbps=1.5,
                       busbw_p90_gbps=2.0)]
    cross = CrossRank(reference_rank=0, ranks=ranks, collectives=[], bandwidth=bw,
                      matching=Matching(key="pg-seq", matched=1000, unmatched=0, missing_ranks=[n, n + 1, n + 5]))
    return Report(inputs=[], ranks=[], collectives=[], cross_rank=cross,
                  summary=Summary(ranks=n, steps=1, overlap_pct=None, exposed_comm_fraction=None, worst_rank=None))


@pytest.mark.parametrize("width", [80, 120])
def test_1024_ranks_show_the_ends_and_the_distribution(width):
    text = render(report(1024), "text", color=False, width=width)
    assert max(map(len, text.splitlines())) <= width
    lines = [ln.strip("│ ") for ln in text.splitlines()]           # boxed from 120 columns on
    rows = [ln.split()[0] for ln in lines if ln[:1].isdigit() and "node" in ln]
    # The 5 ranks that waited most (1023 down to 1019), then the 5 that waited least (4 down to 0).
    assert rows == ["1023", "1022", "1021", "1020", "1019", "4", "3", "2", "1", "0"]
    # Wait of rank r is r ms: min 0, nearest-rank p10 of 0..1023 ms is 102 ms, median 512, p90 921, max 1023.
    spread = " ".join(ln for ln in lines if "wait over" in ln or "median" in ln or "shown" in ln)
    for part in ("min 0.000", "p10 102.000", "median 512.000", "p90 921.000", "max 1,023.000"):
        assert part in spread
    assert "ranks not given: 1024–1025, 1029" in " ".join(lines)


def test_few_ranks_are_all_listed_and_the_uncorrected_offset_is_marked():
    text = render(report(8), "text", color=False, width=80)
    rows = [ln.split() for ln in text.splitlines() if ln[:1].isdigit() and "node" in ln]
    assert [r[0] for r in rows] == [str(r) for r in range(8)]
    assert rows[5][-1] == "+0.000*" and "* clock offset too uncertain to apply" in text.replace("\n", " ")
    assert "16 MiB–256 MiB" in text and "all_gather (latency)" in text


def test_markdown_has_both_tables():
    md = render(report(1024), "markdown")
    assert "## Across ranks" in md and "### Bus bandwidth" in md
    assert md.count("| node") == 10 and "| … |" in md
    assert "| all_reduce | 1024 | 16 MiB–256 MiB | 1000 | 120.5 | 200.2 | 230.5 | 241.0 |" in md
