"""The figures show the Report's numbers: bar heights, heatmap cells, table rows are checked against the
values the hand-made Report (tests/fixtures/reports.py) was built from."""

from __future__ import annotations

import pytest

from conftest import SAMPLES

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")

from tracelens.renderers import figures  # noqa: E402

from fixtures.colours import too_close  # noqa: E402
from fixtures.reports import MS, synthetic  # noqa: E402


def bars(fig) -> dict[str, dict[str, float]]:
    """legend name -> {x label: y} of every bar trace."""
    return {t.name: dict(zip(t.x, t.y)) for t in fig.data if t.type == "bar"}


def test_budget_bars_of_rank_3_are_its_segments():
    rep = synthetic(4, 3)
    t = rep.ranks[3].totals
    got = bars(figures.budget(rep))
    # rank 3, steps 0..2: compute 13 ms each; exposed (21 % 5, 22 % 5, 23 % 5) = 1, 2, 3 ms; overlap 4 - exposed
    assert got["compute only"]["3"] == pytest.approx((t.compute_ns - t.overlap_ns) * 1e-6)
    assert got["overlapped comm"]["3"] == pytest.approx(t.overlap_ns * 1e-6) == pytest.approx(12 - 6)
    assert got["exposed comm"]["3"] == pytest.approx(t.exposed_comm_ns * 1e-6) == pytest.approx(6)
    assert got["idle"]["3"] == pytest.approx(t.idle_ns * 1e-6) == pytest.approx(0 + 0.5 + 1.0)
    # copies outside compute and comm: 0.25 ms per step, by construction
    assert got["copy only"]["3"] == pytest.approx(0.75)
    assert sum(v["3"] for v in got.values()) == pytest.approx(t.duration_ns * 1e-6)


def test_budget_of_one_step_and_sorting():
    rep = synthetic(4, 3)
    fig = figures.budget(rep, step=1, sort="exposed")
    got = bars(fig)
    # step 1: exposed of rank r is (7r + 1) % 5 ms -> ranks 0..3: 1, 3, 0, 2 ms; sorted largest first: 1, 3, 0, 2
    assert list(got["exposed comm"]) == ["1", "3", "0", "2"]
    assert [got["exposed comm"][k] for k in ("1", "3", "0", "2")] == pytest.approx([3, 2, 1, 0])
    assert fig.layout.xaxis.categoryarray == ("1", "3", "0", "2")
    assert "step 1" in fig.layout.title.text
    with pytest.raises(ValueError):
        figures.sort_rows([], "nonsense")


def test_budget_axes_have_units_and_the_palette():
    fig = figures.budget(synthetic(2, 2))
    assert fig.layout.yaxis.title.text == "time (ms)"
    colors = {t.name: t.marker.color for t in fig.data}
    assert colors["exposed comm"] == figures.PALETTE["exposed"]
    assert colors["overlapped comm"] == figures.PALETTE["overlapped"]
    assert colors["compute only"] == figures.PALETTE["compute"]


def test_many_ranks_become_a_distribution_and_the_worst_ranks():
    rep = synthetic(100, 2)
    fig = figures.budget(rep)
    worst = [t for t in fig.data if t.type == "bar"]
    assert all(len(t.x) == figures.WORST for t in worst)
    exposed = next(t for t in worst if t.name == "exposed comm")
    # totals over steps 0 and 1: exposed (7r % 5) + ((7r + 1) % 5) ms; the worst have 4 + 0 = 4 or 3 + 4 = 7 ms
    best = max(((7 * r) % 5) + ((7 * r + 1) % 5) for r in range(100))
    assert exposed.y[0] == pytest.approx(best)
    line = next(t for t in fig.data if t.type == "scattergl" and t.name == "exposed comm")
    assert len(line.y) == 100 and list(line.y) == sorted(line.y)


def test_heatmap_cells_are_the_step_metrics():
    rep = synthetic(4, 3)
    fig = figures.heatmap(rep, "exposed_comm_fraction")
    (hm,) = fig.data
    assert list(hm.y) == [0, 1, 2, 3] and list(hm.x) == [0, 1, 2]
    assert hm.z[3][2] == rep.ranks[3].steps[2].exposed_comm_fraction
    ranks, steps, z = figures.heatmap_grid(rep, "duration_ns")
    assert z[1][0] == pytest.approx(rep.ranks[1].steps[0].duration_ns * 1e-6)
    assert figures.heatmap_grid(rep, "overlap_pct")[2][2][1] == rep.ranks[2].steps[1].overlap_pct
    with pytest.raises(ValueError):
        figures.heatmap_grid(rep, "nonsense")


def test_heatmap_leaves_missing_steps_empty():
    rep = synthetic(2, 3)
    del rep.ranks[1].steps[2]
    _, steps, z = figures.heatmap_grid(rep)
    assert steps == [0, 1, 2] and z[1][2] is None and z[0][2] is not None


def test_findings_rows_are_sorted_and_filtered():
    rep = synthetic(7, 2)
    rows = figures.findings_rows(rep)
    # ranks 0, 3, 6 have a finding; odd ranks' are warnings, even ranks' critical
    assert [(r["rank"], r["severity"]) for r in rows] == [(0, "critical"), (6, "critical"), (3, "warning")]
    assert [r["rank"] for r in figures.findings_rows(rep, severity=["warning"])] == [3]
    assert [r["rank"] for r in figures.findings_rows(rep, text="RANK 6 waits")] == [6]


def test_the_verdict_bar_and_rows_are_the_verdicts():
    import tracelens
    rep = tracelens.report(str(SAMPLES / "straggler"))
    rows = figures.verdict_causes(rep)
    # The straggler sample's verdict (tests/integration/test_verdict.py): peer-wait 3.2 ms (16.3 %), then 2.0 ms.
    assert [(r["cause"], r["ms per step"], r["of step"]) for r in rows][:2] == [
        ("peer-wait", "3.200", "16.3 %"), ("not-overlapped", "2.000", "10.2 %")]
    assert figures.culprit(rep) == 3
    fig = figures.verdict_bar(rep)
    shares = {t.name: t.x[0] for t in fig.data}
    assert shares["peer-wait"] == pytest.approx(100 * rep.verdict.causes[0].share_of_step)
    assert sum(shares.values()) == pytest.approx(100)


def test_collectives_rows_most_exposed_first():
    rep = synthetic(3, 2, collectives_per_step=2)
    rows = figures.collectives_rows(rep, top=3)
    assert len(rows) == 3
    top = max(rep.collectives, key=lambda c: c.exposed_ns)
    assert rows[0]["exposed_ms"] == pytest.approx(top.exposed_ns * 1e-6)
    assert [r["exposed_ms"] for r in rows] == sorted((r["exposed_ms"] for r in rows), reverse=True)


def test_headline_and_spread():
    rep = synthetic(4, 3)
    head = dict(figures.headline(rep))
    assert head["overlap"] == f"{rep.summary.overlap_pct:.2f} %"
    assert head["exposed comm"] == f"{rep.summary.exposed_comm_ns * 1e-6:.3f} ms"
    # The most exposed rank by name; what fixing the overlap buys is the verdict's to say (its causes' cost
    # per step), not a second number computed another way.
    assert head["most exposed rank"] == str(rep.summary.worst_rank) and "perfect overlap gain" not in head
    rows = figures.budget_rows(rep)
    lo = min(rows, key=lambda r: r["exposed"])
    assert f"{lo['exposed'] * 1e-6:.3f} ms (rank {lo['rank']})" in figures.spread_line(rows)


def test_compare_deltas():
    a, b = synthetic(2, 2), synthetic(2, 2)
    b.ranks[1].totals.exposed_comm_ns += 8 * MS        # 8 ms more exposed, the step time unchanged
    b.ranks[0].steps[1].duration_ns += 2 * MS
    rows = figures.compare_rows(a, b)
    assert rows["ranks"][1]["exposed"] == 8 * MS and rows["ranks"][1]["duration"] == 0
    assert rows["steps"][1]["duration"] == 2 * MS and rows["steps"][0]["duration"] == 0
    fig = figures.compare(a, b)
    got = {(t.name, t.xaxis): dict(zip(t.x, t.y)) for t in fig.data}
    assert got[("Δ exposed comm", "x")]["1"] == pytest.approx(8)


def test_spread_line_of_equal_ranks_names_no_extremes():
    rows = [{"rank": 0, "exposed": 2 * MS}, {"rank": 1, "exposed": 2 * MS}]
    assert figures.spread_line(rows) == "every rank has 2.000 ms of exposed comm"


def test_compare_per_step_sums_only_the_ranks_of_both_runs():
    a, b = synthetic(4, 2), synthetic(2, 2)
    rows = figures.compare_rows(a, b)
    # the same generator for ranks 0 and 1: no difference, though run A has two more ranks
    assert [r["rank"] for r in rows["ranks"]] == [0, 1]
    assert [(r["exposed"], r["duration"]) for r in rows["steps"]] == [(0, 0), (0, 0)]


def test_placeholder_has_no_axes():
    fig = figures.placeholder("pick one")
    assert fig.layout.xaxis.visible is False and fig.layout.annotations[0].text == "pick one"


def taxed(n_ranks: int, n_steps: int):
    """The synthetic Report with an overlap tax of (rank + step + 1) x 0.25 ms in each step, its effective
    exposed time the step's exposed comm plus it, and the rank totals their sums (as docs/metrics.md defines)."""
    rep = synthetic(n_ranks, n_steps)
    for r in rep.ranks:
        for s in r.steps:
            s.overlap_tax_ns = (r.rank + s.step + 1) * MS // 4
            s.effective_exposed_ns = s.exposed_comm_ns + s.overlap_tax_ns
        r.totals.overlap_tax_ns = sum(s.overlap_tax_ns for s in r.steps)
        r.totals.effective_exposed_ns = sum(s.effective_exposed_ns for s in r.steps)
    return rep


def test_heatmap_shows_the_overlap_tax_and_effective_exposed():
    rep = taxed(4, 3)
    _, _, tax = figures.heatmap_grid(rep, "overlap_tax_ns")
    _, _, eff = figures.heatmap_grid(rep, "effective_exposed_ns")
    # rank 3, step 2: tax (3 + 2 + 1) x 0.25 = 1.5 ms; effective = its exposed comm ((21 + 2) % 5 = 3 ms) + 1.5
    assert tax[3][2] == pytest.approx(1.5) and eff[3][2] == pytest.approx(4.5)
    assert eff[1][0] == pytest.approx(rep.ranks[1].steps[0].effective_exposed_ns * 1e-6)
    fig = figures.heatmap(rep, "overlap_tax_ns")
    assert "Overlap tax" in fig.layout.title.text and fig.data[0].colorbar.title.text == "ms"


def test_budget_hover_carries_the_tax_beside_overlap():
    rep = taxed(4, 3)
    fig = figures.budget(rep)
    hover = dict(zip(fig.data[0].x, fig.data[0].hovertext))
    t = rep.ranks[2].totals
    # rank 2: tax (3 + 4 + 5) x 0.25 = 3 ms over its 3 steps
    assert t.overlap_tax_ns == 3 * MS
    assert "overlap tax 3.000000 ms" in hover["2"]
    assert f"effective exposed {t.effective_exposed_ns * 1e-6:.6f} ms" in hover["2"]


def test_dimension_bars_are_the_summary_numbers():
    from tracelens.contract import DimensionRun

    rep = synthetic(4, 3)
    assert figures.dimensions(rep) is None                  # nothing attributed: no figure
    # hand-made: tp 40 ms of comm with 10 exposed (75 % hidden), dp 30 ms with 3 exposed
    rep.summary.dimensions = [
        DimensionRun(dimension="tp", ranks=4, comm_ns=40 * MS, exposed_comm_ns=10 * MS, overlap_pct=75.0,
                     worst_rank=2, worst_exposed_ns=4 * MS, rules=["name"]),
        DimensionRun(dimension="dp", ranks=4, comm_ns=30 * MS, exposed_comm_ns=3 * MS, overlap_pct=90.0,
                     worst_rank=0, worst_exposed_ns=1 * MS, rules=["layout-world"])]
    got = bars(figures.dimensions(rep))
    assert got["exposed comm"] == {"tp": 10.0, "dp": 3.0}
    assert got["overlapped comm"] == {"tp": 30.0, "dp": 27.0}
    assert figures.dimension_rows(rep)[0]["worst_rank"] == 2


# ------------------------------------------------------------------ issue 46: every series of a figure apart

def legend(fig) -> dict[str, str]:
    """Legend name -> colour of every trace a legend shows: a line's line, else its marker (bars, points)."""
    out = {}
    for t in fig.data:
        if t.showlegend is not False:
            out[t.name] = t.line.color if t.type != "bar" and "lines" in (t.mode or "") else t.marker.color
    return out


def _figures_of_the_samples():
    """Every figure of the dashboard and the HTML report that draws named series, on the samples that draw
    them: the straggler sample (4 ranks, cross-rank views, verdict), wfbp_100 against it (the compare view),
    the many-ranks distribution (max_bars below its 4 ranks) and the outlier run (tests/integration/
    test_outliers.py)."""
    import tracelens
    from tracelens.renderers import across_ranks

    straggler, wfbp = tracelens.report(str(SAMPLES / "straggler")), tracelens.report(str(SAMPLES / "wfbp_100"))
    yield "budget", figures.budget(straggler)
    yield "budget distribution", figures.budget(straggler, max_bars=2)
    yield "verdict bar", figures.verdict_bar(straggler)
    yield "dimensions", figures.dimensions(wfbp)
    yield "compare", figures.compare(wfbp, straggler)
    yield "wait vs transfer", across_ranks.wait_transfer(straggler)
    yield "strip", across_ranks.strip(straggler, 2)


def test_every_series_of_a_sample_figure_has_a_colour_apart_from_the_others():
    drawn = {name: legend(fig) for name, fig in _figures_of_the_samples() if fig is not None}
    assert len(drawn) == 7 and all(len(s) >= 2 for s in drawn.values()), drawn
    assert {name: too_close(series) for name, series in drawn.items() if too_close(series)} == {}


def test_every_series_a_figure_can_draw_has_a_colour_apart_from_the_others():
    """What a figure draws beyond the samples: the timeline's every kind of activity with the exposed lane and
    the wait apart from the transfer (the mfu_2gpu_before export draws all eight; 'comm' and 'transfer' were
    the same sky blue, 'memcpy' and 'memset' the same orange), every outlier cause beside the usual instances,
    every verdict cause beside the rest of the step, and as many ops or history labels as there are series
    colours."""
    from tracelens.renderers import outlier_figure, timeline_figure

    can_draw = {
        "timeline": {**timeline_figure.KIND_COLORS, **timeline_figure.PEER_COLORS, "exposed": figures.PALETTE["exposed"]},
        "outliers": {**outlier_figure.CAUSE_COLORS, "instance": figures.PALETTE["neutral"]},
        "verdict bar": {**figures.CAUSE_COLORS, "rest of the step": figures.PALETTE["neutral"]},
        "ops and labels": {str(n): c for n, c in enumerate(figures.SERIES)},
    }
    assert len(can_draw["timeline"]) == 8 and len(can_draw["ops and labels"]) == 7
    assert {name: too_close(series) for name, series in can_draw.items() if too_close(series)} == {}


def test_the_figures_colours_are_the_palettes():
    """One palette: no renderer names a colour of its own (a hex literal) outside figures.PALETTE."""
    import re
    from pathlib import Path

    from conftest import ROOT

    literal = re.compile(r"#[0-9A-Fa-f]{6}\b|#[0-9A-Fa-f]{3}\b(?![0-9A-Fa-f])")
    palette = set(figures.PALETTE.values())
    stray = {}
    for path in [*(ROOT / "tracelens" / "renderers").glob("*.py"), *(ROOT / "dashboards").glob("*.py")]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            for hit in literal.findall(line):
                if not (path.name == "figures.py" and hit in palette):
                    stray[f"{path.name}:{n}"] = hit
    assert stray == {}
