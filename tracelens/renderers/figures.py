"""Plotly figures from a Report, shared by the dashboard and the HTML report. They arrange the Report's numbers
(sums, differences of its own fields, sorting); they never compute a metric. plotly is imported lazily: the
core installs without the ``dashboard`` extra.

The views across ranks (wait vs transfer, the collective strip on the aligned clock, busbw vs message size, the
transport verdict) are in ``across_ranks.py``, read from the Report's ``cross_rank`` / ``transport``.
"""

from __future__ import annotations

from typing import Iterable, Optional

from ..contract import Report
from .run_tables import VERDICT_HEADERS, tax_measured, verdict_cells

# The one palette: every figure, the dashboard's and the HTML report's, names its colours from here. Okabe-Ito's
# hues, each at its own lightness, so that every series of one figure stays apart (CIEDE2000: at least 20 in
# normal vision, 10 under each full dichromacy, 7 in grey scale; tests/unit/test_figures.py measures it).
# Lightness (L*) in brackets: the timeline's eight series step from 16 to 91.
PALETTE = {
    "compute": "#003E83",        # navy blue [27]
    "overlapped": "#01724B",     # green [42]: communication hidden under compute
    "exposed": "#D55E00",        # vermillion [54]: communication on the critical path
    "idle": "#999999",           # grey [63]
    "copy": "#EDA52C",           # orange [73]: memcpy, and copy-only time
    "memset": "#635710",         # olive brown [37]
    "sync": "#520137",           # dark wine [16]
    "comm": "#45A1D2",           # sky blue [63]: a communication kernel
    "transfer": "#007C67",       # teal [46]: data moving in a matched collective (across ranks, timeline)
    "wait": "#EEEC40",           # yellow [91]: waiting for peers
    "neutral": "#B9B9B9",        # light grey [75]: what is not the subject (the rest of a step, usual instances)
    "total": "#000000",          # black: step time, a whole
    "ink": "#444444",            # dark grey: reference lines and outlines, the info findings' text
    "warning-ink": "#B07000",    # dark orange: the warning findings' text (the orange is too light to read)
    "card": "#F3F5F8",           # the background of a card (the verdict, the headline numbers)
    "text": "#222222",           # the HTML report's text
    "rule": "#DDDDDD",           # a table's lines
}
# Series colours in the order a figure of named series (ops, history labels) takes them: seven of the timeline's
# eight, apart from each other in every vision above; the yellow left out (thin marks on white).
SERIES = tuple(PALETTE[k] for k in ("compute", "exposed", "transfer", "copy", "sync", "comm", "memset"))
SEVERITY_COLORS = {"critical": PALETTE["exposed"], "warning": PALETTE["copy"], "info": PALETTE["comm"]}
MS = 1e-6                        # ns -> ms, the unit of every time axis
UNKNOWN = "n/a"                  # what a card or cell shows where the Report has no value (or none measured)
MAX_BARS = 64                    # more ranks than this: a sorted distribution plus the worst ranks
WORST = 16                       # ranks in the "worst ranks" bars
HEATMAP_METRICS = {
    "exposed_comm_fraction": ("exposed comm fraction", "fraction of step", ".3f"),
    "overlap_pct": ("overlap", "% of comm", ".1f"),
    "duration_ns": ("step time", "ms", ".3f"),
    "overlap_tax_ns": ("overlap tax", "ms", ".3f"),          # compute slowed by the comm beside it
    "effective_exposed_ns": ("effective exposed", "ms", ".3f"),  # exposed comm + overlap tax
}
SEGMENTS = (  # (key, legend name, colour): stacked from the bottom, summing to the step duration
    ("compute_only", "compute only", PALETTE["compute"]),
    ("overlapped", "overlapped comm", PALETTE["overlapped"]),
    ("exposed", "exposed comm", PALETTE["exposed"]),
    ("copy_only", "copy only", PALETTE["copy"]),
    ("idle", "idle", PALETTE["idle"]),
)
SORTS = ("rank", "exposed", "compute", "duration")


def plotly_go():
    import plotly.graph_objects as go  # lazy: plotly, the optional ``dashboard`` extra

    return go


# --------------------------------------------------------------------------------------------- rank budget

def budget_rows(report: Report, step: Optional[int] = None) -> list[dict]:
    """Per rank, its budget (ns) over all steps (``step=None``: its totals) or in one step (ranks without that
    step are left out). Segments split the duration: compute only = compute - overlap; copy only = duration -
    compute - exposed - idle (busy device time that is neither compute nor comm)."""
    rows = []
    for r in report.ranks:
        m = r.totals if step is None else next((s for s in r.steps if s.step == step), None)
        if m is None:
            continue
        rows.append({
            "rank": r.rank, "duration": m.duration_ns, "compute": m.compute_ns, "comm": m.comm_ns,
            "compute_only": m.compute_ns - m.overlap_ns, "overlapped": m.overlap_ns,
            "exposed": m.exposed_comm_ns, "idle": m.idle_ns, "copy": m.copy_ns,
            "copy_only": m.duration_ns - m.compute_ns - m.exposed_comm_ns - m.idle_ns,
            "overlap_pct": m.overlap_pct, "exposed_comm_fraction": m.exposed_comm_fraction,
            "tax": m.overlap_tax_ns, "effective": m.effective_exposed_ns,
        })
    return rows


def sort_rows(rows: list[dict], sort: str = "rank") -> list[dict]:
    """Ranks in ``sort`` order: by rank, or by exposed comm / compute / duration, largest first."""
    if sort not in SORTS:
        raise ValueError(f"unknown sort {sort!r}; choose one of {', '.join(SORTS)}")
    if sort == "rank":
        return sorted(rows, key=lambda r: r["rank"])
    return sorted(rows, key=lambda r: (-r[sort], r["rank"]))


def steps_of(report: Report) -> list[Optional[int]]:
    """Every step number of the run, in order (None: a rank without ProfilerStep, reported as one window)."""
    nums = {s.step for r in report.ranks for s in r.steps}
    return sorted(nums, key=lambda s: (s is not None, s if s is not None else 0))


def spread_line(rows: list[dict]) -> str:
    """One line naming the largest spread between ranks (of exposed comm), from the rows' own numbers."""
    if len(rows) < 2:
        return ""
    lo = min(rows, key=lambda r: (r["exposed"], r["rank"]))
    hi = max(rows, key=lambda r: (r["exposed"], -r["rank"]))
    if lo["exposed"] == hi["exposed"]:
        return f"every rank has {lo['exposed'] * MS:.3f} ms of exposed comm"
    return (f"exposed comm ranges from {lo['exposed'] * MS:.3f} ms (rank {lo['rank']}) to "
            f"{hi['exposed'] * MS:.3f} ms (rank {hi['rank']})")


def _hover(rows: list[dict]) -> list[str]:
    return [f"rank {r['rank']}<br>duration {r['duration'] * MS:.6f} ms<br>compute {r['compute'] * MS:.6f} ms"
            f"<br>comm {r['comm'] * MS:.6f} ms<br>overlapped {r['overlapped'] * MS:.6f} ms"
            f"<br>exposed {r['exposed'] * MS:.6f} ms<br>idle {r['idle'] * MS:.6f} ms"
            f"<br>copy {r['copy'] * MS:.6f} ms<br>overlap {_pct(r['overlap_pct'])}"
            f"<br>overlap tax {r['tax'] * MS:.6f} ms<br>effective exposed {r['effective'] * MS:.6f} ms"
            for r in rows]


def placeholder(text: str):
    """An empty figure holding only ``text`` (a view waiting for a choice): no axes to misread."""
    go = plotly_go()
    fig = go.Figure()
    fig.update_layout(xaxis={"visible": False}, yaxis={"visible": False}, annotations=[
        {"text": text, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5,
         "font": {"size": 14}}], margin={"t": 20, "b": 20})
    return fig


def _pct(v: Optional[float]) -> str:
    return UNKNOWN if v is None else f"{v:.2f} %"


def budget(report: Report, step: Optional[int] = None, sort: str = "rank", max_bars: int = MAX_BARS):
    """The rank time budget: stacked bars per rank, or past ``max_bars`` ranks a sorted distribution plus the
    worst ranks by exposed comm."""
    rows = sort_rows(budget_rows(report, step), sort)
    title = f"Rank time budget ({'all steps' if step is None else f'step {step}'})"
    line = spread_line(rows)
    if len(rows) > max_bars:
        return _budget_distribution(rows, title, line)
    go = plotly_go()
    fig = go.Figure()
    labels = [str(r["rank"]) for r in rows]
    text = _hover(rows)
    for key, name, color in SEGMENTS:
        fig.add_trace(go.Bar(x=labels, y=[r[key] * MS for r in rows], name=name, marker_color=color,
                             hovertext=text, hovertemplate="%{hovertext}<extra>" + name + " %{y:.6f} ms</extra>"))
    fig.update_layout(barmode="stack", title=heading(title, line), legend_orientation="h", legend_y=-0.2,
                      xaxis={"title": "rank", "type": "category",
                             "categoryorder": "array", "categoryarray": labels},
                      yaxis={"title": "time (ms)"}, margin={"t": 70})
    return fig


def heading(title: str, line: str) -> dict:
    return {"text": title + (f"<br><sup>{line}</sup>" if line else "")}


def _budget_distribution(rows: list[dict], title: str, line: str):
    """Many ranks: each segment sorted over the ranks (x: share of ranks), and the worst ranks as bars."""
    from plotly.subplots import make_subplots  # lazy: plotly, the optional ``dashboard`` extra

    go = plotly_go()
    fig = make_subplots(rows=1, cols=2, column_widths=[0.6, 0.4], horizontal_spacing=0.1,
                        subplot_titles=("distribution over ranks (each series sorted)",
                                        f"{WORST} ranks with the most exposed comm"))
    n = len(rows)
    for key, name, color in (*SEGMENTS, ("duration", "step time", PALETTE["total"])):
        ordered = sorted(rows, key=lambda r: (r[key], r["rank"]))
        fig.add_trace(go.Scattergl(
            x=[100.0 * i / max(n - 1, 1) for i in range(n)], y=[r[key] * MS for r in ordered], mode="lines",
            name=name, line_color=color, legendgroup=key, customdata=[r["rank"] for r in ordered],
            hovertemplate="rank %{customdata}: %{y:.6f} ms<extra>" + name + "</extra>"), row=1, col=1)
    worst = sort_rows(rows, "exposed")[:WORST]
    labels = [str(r["rank"]) for r in worst]
    text = _hover(worst)
    for key, name, color in SEGMENTS:
        fig.add_trace(go.Bar(x=labels, y=[r[key] * MS for r in worst], name=name, marker_color=color,
                             legendgroup=key, showlegend=False, hovertext=text,
                             hovertemplate="%{hovertext}<extra>" + name + " %{y:.6f} ms</extra>"), row=1, col=2)
    fig.update_layout(barmode="stack", title=heading(title, line), legend_orientation="h", legend_y=-0.2,
                      margin={"t": 90})
    fig.update_xaxes(title_text="ranks at or below (%)", row=1, col=1)
    fig.update_xaxes(title_text="rank", type="category", categoryorder="array", categoryarray=labels, row=1, col=2)
    fig.update_yaxes(title_text="time (ms)", row=1, col=1)
    fig.update_yaxes(title_text="time (ms)", row=1, col=2)
    return fig


# ----------------------------------------------------------------------------------------------- heatmap

def heatmap_grid(report: Report, metric: str = "exposed_comm_fraction"):
    """(ranks, steps, z): z[i][j] is the metric of rank ``ranks[i]`` in step ``steps[j]`` (None where the rank
    has no such step or the ratio is undefined)."""
    if metric not in HEATMAP_METRICS:
        raise ValueError(f"unknown metric {metric!r}; choose one of {', '.join(HEATMAP_METRICS)}")
    steps = steps_of(report)
    col = {s: j for j, s in enumerate(steps)}
    ranks = [r.rank for r in report.ranks]
    z: list[list] = []
    for r in report.ranks:
        row: list = [None] * len(steps)
        for s in r.steps:
            v = getattr(s, metric)
            row[col[s.step]] = None if v is None else (v * MS if metric.endswith("_ns") else v)
        z.append(row)
    return ranks, steps, z


def heatmap(report: Report, metric: str = "exposed_comm_fraction", clickable: bool = True):
    """Rank × step heatmap: one trace, one image at any size. A cell's customdata is [rank, step].
    ``clickable``: the title says that a click opens the cell's timeline (the dashboard; an HTML file has no
    timeline to open)."""
    go = plotly_go()
    ranks, steps, z = heatmap_grid(report, metric)
    label, unit, fmt = HEATMAP_METRICS[metric]
    xs = ["all" if s is None else s for s in steps]
    # Overlap on its full scale; exposed fraction from 0 to the worst cell (a uniform run is not "mid-bad").
    top = max((v for row in z for v in row if v is not None), default=0.0) or 1.0
    limits = {"exposed_comm_fraction": {"zmin": 0.0, "zmax": top},
              "overlap_pct": {"zmin": 0.0, "zmax": 100.0}}.get(metric, {})
    scale = "Cividis" if metric != "overlap_pct" else "Cividis_r"
    import numpy as np  # lazy: numpy, only for the heatmap's grid

    # As a float array plotly sends the grid as binary (a 1,024 x 50 grid in a third of the time); an empty
    # cell is NaN only here, in the drawing, where plotly leaves it blank.
    grid = np.array([[np.nan if v is None else v for v in row] for row in z], dtype=float)
    fig = go.Figure(go.Heatmap(
        z=grid, x=xs, y=ranks, colorscale=scale, colorbar={"title": {"text": unit}}, **limits,
        hovertemplate=f"rank %{{y}}, step %{{x}}<br>{label}: %{{z:{fmt}}} {unit}<extra></extra>"))
    click = " (click a cell for its timeline)" if clickable else ""
    fig.update_layout(title={"text": f"{label.capitalize()} per rank and step{click}"},
                      xaxis={"title": "step", "type": "category"},
                      yaxis={"title": "rank", "autorange": "reversed",
                             "type": "category" if len(ranks) <= MAX_BARS else "linear"},
                      margin={"t": 60})
    return fig


# ------------------------------------------------------------------------------------ parallelism dimensions

def dimension_rows(report: Report) -> list[dict]:
    """The run's ``summary.dimensions`` (most exposed first), times in ms."""
    return [{"dimension": d.dimension, "ranks": d.ranks, "comm_ms": d.comm_ns * MS,
             "exposed_ms": d.exposed_comm_ns * MS, "overlapped_ms": (d.comm_ns - d.exposed_comm_ns) * MS,
             "overlap_pct": d.overlap_pct, "worst_rank": d.worst_rank, "worst_exposed_ms": d.worst_exposed_ns * MS,
             "rules": ", ".join(d.rules)} for d in report.summary.dimensions]


def dimensions(report: Report):
    """Exposed and hidden communication per parallelism dimension (summed over the ranks), most exposed first;
    None when no communication was attributed to one."""
    rows = dimension_rows(report)
    if not rows:
        return None
    go = plotly_go()
    fig = go.Figure()
    labels = [r["dimension"] for r in rows]
    text = [f"{r['dimension']}: {r['ranks']} ranks<br>comm {r['comm_ms']:.6f} ms<br>exposed {r['exposed_ms']:.6f} ms"
            f"<br>overlap {_pct(r['overlap_pct'])}<br>most exposed rank {r['worst_rank']} ({r['worst_exposed_ms']:.6f} ms "
            f"exposed)<br>attributed by {r['rules']}" for r in rows]
    for key, name, color in (("exposed_ms", "exposed comm", PALETTE["exposed"]),
                             ("overlapped_ms", "overlapped comm", PALETTE["overlapped"])):
        fig.add_trace(go.Bar(x=labels, y=[r[key] for r in rows], name=name, marker_color=color, hovertext=text,
                             hovertemplate="%{hovertext}<extra>" + name + " %{y:.6f} ms</extra>"))
    fig.update_layout(barmode="stack", title=heading("Communication per parallelism dimension",
                                                     "all ranks and steps, most exposed first"),
                      xaxis={"title": "dimension", "type": "category"}, yaxis={"title": "time (ms)"},
                      legend_orientation="h", legend_y=-0.2, margin={"t": 70})
    return fig


# -------------------------------------------------------------------------------------------------- tables

def findings_rows(report: Report, severity: Iterable[str] = (), text: str = "") -> list[dict]:
    """The findings as table rows, most severe first; filtered by severity and by a text in any column. Each
    row's ``opens``: the step whose timeline a click on it opens (``opened_step``)."""
    order = {"critical": 0, "warning": 1, "info": 2}
    keep = set(severity)
    needle = text.lower().strip()
    rows = []
    for d in report.diagnoses:
        row = {"severity": d.severity, "id": d.id, "rank": d.rank, "step": d.step, "title": d.title,
               "detail": d.detail, "advice": d.advice}
        if keep and d.severity not in keep:
            continue
        if needle and not any(needle in str(v).lower() for v in row.values()):
            continue
        # The step a click on the finding opens (None: its whole-trace window, or none: opened_step); after
        # the filter, which matches what the row shows.
        row["opens"] = opened_step(report, d)[1]
        rows.append(row)
    rows.sort(key=lambda r: (order.get(r["severity"], 3), r["rank"], -1 if r["step"] is None else r["step"]))
    return rows


def collectives_rows(report: Report, top: Optional[int] = None) -> list[dict]:
    """The collectives as table rows, most exposed first (``top``: only that many); times in ms."""
    ordered = sorted(report.collectives, key=lambda c: (-c.exposed_ns, c.rank, c.start_ns))
    if top is not None:
        ordered = ordered[:top]
    return [{"rank": c.rank, "step": c.step, "op": c.op, "name": c.name, "bytes": c.bytes,
             "duration_ms": c.duration_ns * MS, "exposed_ms": c.exposed_ns * MS, "start_ns": c.start_ns}
            for c in ordered]


def headline(report: Report) -> list[tuple[str, str]]:
    """The run's headline numbers, as (label, value) pairs."""
    s = report.summary
    frac = UNKNOWN if s.exposed_comm_fraction is None else f"{100 * s.exposed_comm_fraction:.2f} %"
    return [("ranks", str(s.ranks)), ("steps", str(s.steps)), ("overlap", _pct(s.overlap_pct)),
            ("exposed comm fraction", frac), ("comm", f"{s.comm_ns * MS:.3f} ms"),
            ("exposed comm", f"{s.exposed_comm_ns * MS:.3f} ms"),
            ("most exposed rank", UNKNOWN if s.worst_rank is None else str(s.worst_rank)),
            ("pattern", s.pattern or UNKNOWN),
            ("overlap tax", f"{s.overlap_tax_ns * MS:.3f} ms" if tax_measured(report) else UNKNOWN),
            ("effective exposed", f"{s.effective_exposed_ns * MS:.3f} ms")]


# ------------------------------------------------------------------------------------------ the run verdict

CAUSE_COLORS = {"peer-wait": PALETTE["wait"], "not-overlapped": PALETTE["exposed"], "overlap-tax": PALETTE["sync"]}


def verdict_causes(report: Report) -> list[dict]:
    """The verdict's causes as rows: cost per step (ms, as the headline rounds it), share, ranks, why, lever.
    An overlap tax that was not measured reads as the headline card says it (n/a), with no share to draw."""
    if report.verdict is None:
        return []
    rows = []
    for c in report.verdict.causes:
        row = dict(zip(VERDICT_HEADERS, verdict_cells(report, c)), lever=c.lever, ns_per_step=c.ns_per_step,
                   share=c.share_of_step)
        if c.cause == "overlap-tax" and not tax_measured(report):
            row.update(ns_per_step=None, share=None)
        rows.append(row)
    return rows


def culprit(report: Report) -> Optional[int]:
    """The rank the others wait for, per the verdict (None without one)."""
    if report.verdict is None:
        return None
    return next((c.culprit.rank for c in report.verdict.causes if c.culprit is not None), None)


def culprit_step(report: Report) -> tuple[Optional[int], Optional[int]]:
    """The culprit and the step where its lateness cost the others the most wait (its straggler finding's
    ``caused_wait_by_step``, as a click on that finding opens it: ``opened_step``; the step is None for a
    whole-trace window); (None, None) without a culprit."""
    rank = culprit(report)
    if rank is None:
        return None, None
    found = next((d for d in report.diagnoses if d.id == "straggler" and d.rank == rank), None)
    opens, step = opened_step(report, found) if found is not None else (False, None)
    if opens:
        return rank, step
    steps = {s.step for r in report.ranks if r.rank == rank for s in r.steps}
    return rank, next(iter(sorted(steps, key=lambda s: (s is None, s))), None)


def opened_step(report: Report, d) -> tuple[bool, Optional[int]]:
    """(True, the step) whose timeline a click on finding ``d`` opens: its own step; for a finding of its rank
    as a whole (no step) in a rank drawn step by step, the step where it cost the most (a straggler's
    ``caused_wait_by_step``: the first of the costliest); (False, None) when it names no such step."""
    steps = {s.step for r in report.ranks if r.rank == d.rank for s in r.steps}
    if d.step is not None or None in steps:
        return True, d.step
    by_step = (d.evidence or {}).get("caused_wait_by_step") or []
    best = max((pair for pair in by_step if pair[0] in steps), key=lambda pair: pair[1], default=None)
    return (False, None) if best is None else (True, best[0])


def verdict_bar(report: Report):
    """The causes as one bar: each cause's cost per step as a share of the step (the rest of the step in grey);
    None without causes or a step time."""
    rows = [r for r in verdict_causes(report) if r["share"] is not None]
    if not rows:
        return None
    go = plotly_go()
    fig = go.Figure()
    for r in rows:
        fig.add_trace(go.Bar(y=["step"], x=[100 * r["share"]], orientation="h", name=r["cause"],
                             marker_color=CAUSE_COLORS.get(r["cause"], PALETTE["idle"]),
                             hovertext=[f"{r['cause']}: {r['ms per step']} ms per step ({r['of step']})"],
                             hoverinfo="text"))
    rest = max(0.0, 100 - sum(100 * r["share"] for r in rows))
    fig.add_trace(go.Bar(y=["step"], x=[rest], orientation="h", name="rest of the step",
                         marker_color=PALETTE["neutral"], hoverinfo="skip"))
    fig.update_layout(barmode="stack", height=140, margin=dict(l=40, r=20, t=10, b=30),
                      xaxis=dict(title="% of the step (median over ranks)", range=[0, 100]),
                      legend=dict(orientation="h", y=-0.6), showlegend=True)
    return fig


# -------------------------------------------------------------------------------------------- run A vs B

def compare_rows(a: Report, b: Report) -> dict[str, list[dict]]:
    """Run B minus run A (ns) per rank (totals) and per step (the sums over the ranks both runs have), for
    exposed comm, step time and compute; only ranks and steps both runs have."""
    ra, rb = {r.rank: r for r in a.ranks}, {r.rank: r for r in b.ranks}
    common = sorted(ra.keys() & rb.keys())
    ranks = [{"rank": k, "exposed": rb[k].totals.exposed_comm_ns - ra[k].totals.exposed_comm_ns,
              "duration": rb[k].totals.duration_ns - ra[k].totals.duration_ns,
              "compute": rb[k].totals.compute_ns - ra[k].totals.compute_ns}
             for k in common]

    def per_step(rep: Report) -> dict:
        out: dict = {}
        for r in rep.ranks:
            if r.rank not in ra or r.rank not in rb:
                continue
            for s in r.steps:
                e, d, c = out.get(s.step, (0, 0, 0))
                out[s.step] = (e + s.exposed_comm_ns, d + s.duration_ns, c + s.compute_ns)
        return out
    sa, sb = per_step(a), per_step(b)
    steps = [{"step": k, "exposed": sb[k][0] - sa[k][0], "duration": sb[k][1] - sa[k][1],
              "compute": sb[k][2] - sa[k][2]}
             for k in sorted(sa.keys() & sb.keys(), key=lambda s: (s is not None, s or 0))]
    return {"ranks": ranks, "steps": steps}


def compare(a: Report, b: Report, names: tuple[str, str] = ("A", "B")):
    """Per-rank and per-step deltas (B - A) of exposed comm, step time and compute, side by side: an exposed
    comm growth that shrinking compute hides in the step time still shows."""
    from plotly.subplots import make_subplots  # lazy: plotly, the optional ``dashboard`` extra

    go = plotly_go()
    rows = compare_rows(a, b)
    fig = make_subplots(rows=1, cols=2,
                        subplot_titles=("per rank (all steps)", "per step (sum over the ranks of both)"))
    series = (("exposed", "Δ exposed comm", PALETTE["exposed"]), ("duration", "Δ step time", PALETTE["total"]),
              ("compute", "Δ compute", PALETTE["compute"]))
    for col, (part, key) in enumerate((("ranks", "rank"), ("steps", "step")), start=1):
        xs = [str(r[key]) for r in rows[part]]
        for field, name, color in series:
            fig.add_trace(go.Bar(x=xs, y=[r[field] * MS for r in rows[part]], name=name, marker_color=color,
                                 legendgroup=field, showlegend=col == 1,
                                 hovertemplate=f"{key} %{{x}}: %{{y:.6f}} ms<extra>{name}</extra>"), row=1, col=col)
        fig.update_xaxes(title_text=key, type="category", row=1, col=col)
        fig.update_yaxes(title_text=f"{names[1]} − {names[0]} (ms)", row=1, col=col)
    fig.update_layout(barmode="group", title={"text": f"Run {names[1]} vs run {names[0]}"},
                      legend_orientation="h", legend_y=-0.2, margin={"t": 70})
    return fig


# ----------------------------------------------------------------------------------------------- history

def history(runs: list[dict]):
    """Overlap % and exposed fraction of each label's runs over time (rows of ``api.history_runs``); a point's
    customdata is [run id, commit, source]."""
    from plotly.subplots import make_subplots  # lazy: plotly, the optional ``dashboard`` extra

    go = plotly_go()
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08,
                        subplot_titles=("overlap (% of comm hidden)", "exposed comm fraction (of step time)"))
    labels = sorted({r["label"] for r in runs})
    for n, label in enumerate(labels):
        mine = [r for r in runs if r["label"] == label]
        data = [[r["id"], r.get("commit") or "", r.get("source") or ""] for r in mine]
        for row, key, fmt in ((1, "overlap_pct", ".2f"), (2, "exposed_comm_fraction", ".4f")):
            fig.add_trace(go.Scatter(
                x=[r["created_at"] for r in mine], y=[r[key] for r in mine], mode="lines+markers", name=label,
                line_color=SERIES[n % len(SERIES)],
                legendgroup=label, showlegend=row == 1, customdata=data,
                hovertemplate=f"run %{{customdata[0]}} ({label}) %{{x}}<br>commit %{{customdata[1]}}<br>"
                              f"%{{y:{fmt}}}<br>%{{customdata[2]}}<extra></extra>"), row=row, col=1)
    fig.update_yaxes(title_text="%", row=1, col=1)
    fig.update_yaxes(title_text="fraction", row=2, col=1)
    fig.update_xaxes(title_text="run added (UTC)", row=2, col=1)
    fig.update_layout(title={"text": "History (click a point for its run)"}, legend_orientation="h",
                      legend_y=-0.15, margin={"t": 70})
    return fig
