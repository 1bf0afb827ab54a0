"""The page: the views in the order users want them (docs: the rank budget, the rank × step heatmap, the step
timeline, the findings, the collectives, run A vs run B). Pure component builders; the figures come from
``tracelens.renderers.figures``."""

from __future__ import annotations

from dash import dcc, html
import dash_ag_grid as dag

from tracelens.contract import SEVERITIES
from tracelens.renderers import across_ranks, diff_tables, figures, outlier_figure

MAX_COLLECTIVES = 5_000     # rows sent to the collectives grid (the most exposed); the Report keeps them all
CARD = {"background": figures.PALETTE["card"], "padding": "6px 12px", "borderRadius": "4px"}
SECTION = {"marginTop": "24px"}
# Times in ms with three decimals, as every other output prints them (the exact value is in the Report).
MS_FORMAT = {"function": "params.value == null ? '' : d3.format('.3f')(params.value)"}
# Sizes in IEC units, as every other output (docs/metrics.md, "Units"); the exact bytes on hover.
BYTES_FORMAT = {"function": "params.value == null ? '' : params.value < 1024 ? params.value + ' B' : "
                            "params.value < 1048576 ? d3.format('.1f')(params.value / 1024) + ' KiB' : "
                            "params.value < 1073741824 ? d3.format('.1f')(params.value / 1048576) + ' MiB' : "
                            "d3.format('.1f')(params.value / 1073741824) + ' GiB'"}
GRID = {"sortable": True, "filter": True, "resizable": True}
PICK = "Click a heatmap cell (or a finding, or an outlier) to see that rank and step."
NO_OUTLIERS = ("No collective outliers: no instance far above its kind's median (op, size bucket, group), or none "
               "that is not slow in most steps.")
CHANGE_NAME_WIDTH = 120    # a kernel's or op's name in the changes table, cut past this many characters
WRAP = {"wrapText": True, "autoHeight": True, "cellStyle": {"wordBreak": "normal", "lineHeight": "1.35"}}


def page(session) -> html.Div:
    first = session.runs[0].report
    runs = [{"label": f"run {r.name}", "value": i} for i, r in enumerate(session.runs)]
    return html.Div(style={"fontFamily": "system-ui, sans-serif", "maxWidth": "1400px", "margin": "auto"}, children=[
        html.H2("tracelens: is communication hidden behind compute?"),
        html.Div([html.Label("run "), dcc.Dropdown(id="run", options=runs, value=0, clearable=False,
                                                   style={"width": "300px"})],
                 style={"display": "flex" if len(runs) > 1 else "none", "gap": "8px", "alignItems": "center"}),
        html.Div(id="verdict", children=verdict_children(first), style=VERDICT),
        html.Div(id="headline", children=headline(first), style={"display": "flex", "flexWrap": "wrap",
                                                                   "gap": "12px", "marginTop": "12px"}),
        html.Div(style=SECTION, children=[
            html.Div(style={"display": "flex", "gap": "24px", "alignItems": "center"}, children=[
                html.Label(["step ", dcc.Dropdown(id="step", options=step_options(first), value="all",
                                                  clearable=False, style={"width": "160px"})]),
                html.Label(["sort by ", dcc.RadioItems(id="sort", inline=True, value="rank", options=[
                    {"label": s, "value": s} for s in figures.SORTS])]),
            ]),
            dcc.Graph(id="budget", figure=figures.budget(first), style={"height": "480px"}),
            html.Div(id="dimensions-section", children=dimensions_children(first)),
        ]),
        html.Div(style=SECTION, children=[
            dcc.RadioItems(id="metric", inline=True, value="exposed_comm_fraction", options=[
                {"label": label, "value": key} for key, (label, _, _) in figures.HEATMAP_METRICS.items()]),
            dcc.Graph(id="heatmap", figure=figures.heatmap(first), style={"height": "480px"}),
        ]),
        html.Div(style=SECTION, children=[
            html.H3("Collective outliers"),
            html.Div(id="outliers-info", children=outliers_info(first)),
            dcc.Graph(id="outliers", figure=outliers_figure(first), style=outliers_style(first)),
        ]),
        html.Div(id="timeline-section", style=SECTION, children=[
            html.H3("Step timeline"),
            html.Div(id="timeline-info", children=PICK),
            # No height of its own: the figure's grows with the findings pinned (their labels stacked).
            dcc.Loading(dcc.Graph(id="timeline", figure=figures.placeholder(PICK))),
            dcc.Store(id="timeline-shown"),
        ]),
        html.Div(style=SECTION, children=[
            html.H3("Findings"),
            html.Div(style={"display": "flex", "gap": "24px"}, children=[
                dcc.Checklist(id="severity", inline=True, value=list(SEVERITIES), options=list(SEVERITIES)),
                dcc.Input(id="find-text", type="text", placeholder="filter text", debounce=True),
            ]),
            # Every title reads in full and the detail and advice wrap; the grid is tall and its text compact,
            # so that 8 findings show at once in a 1600x1000 window (tests/browser).
            dag.AgGrid(id="findings", rowData=findings_grid(first), getRowId="params.data.row_id",
                       columnDefs=[
                {"field": "severity", "width": 95}, {"field": "id", "hide": True}, {"field": "rank", "width": 72},
                {"field": "step", "width": 72}, {"field": "title", "flex": 2, **WRAP}, {"field": "detail", "flex": 4, **WRAP},
                {"field": "advice", "flex": 3, **WRAP}],
                defaultColDef=GRID, dashGridOptions={"pagination": True, "paginationPageSize": 20},
                style={"height": "860px", "--ag-font-size": "12px", "--ag-cell-horizontal-padding": "6px",
                       "lineHeight": "1.35"}),
        ]),
        html.Div(style=SECTION, children=[
            html.H3(f"Collectives (the {MAX_COLLECTIVES:,} most exposed)"),
            dag.AgGrid(id="collectives", rowData=figures.collectives_rows(first, MAX_COLLECTIVES), columnDefs=[
                {"field": "rank", "width": 90}, {"field": "step", "width": 90}, {"field": "op", "width": 140},
                {"field": "name", "flex": 2}, {"field": "bytes", "filter": "agNumberColumnFilter",
                                                 "valueFormatter": BYTES_FORMAT, "tooltipField": "bytes"},
                {"field": "duration_ms", "headerName": "duration (ms)", "filter": "agNumberColumnFilter",
                 "valueFormatter": MS_FORMAT},
                {"field": "exposed_ms", "headerName": "exposed (ms)", "filter": "agNumberColumnFilter",
                 "valueFormatter": MS_FORMAT, "sort": "desc"}],
                defaultColDef=GRID, dashGridOptions={"pagination": True, "paginationPageSize": 50},
                style={"height": "480px"}),
        ]),
        across_section(first, session.runs[0].name if len(session.runs) > 1 else None),
        compare_section(session),
        history_section(session),
    ])


VERDICT = {**CARD, "padding": "12px 16px"}


def outliers_info(report) -> str:
    if not report.outliers:
        return NO_OUTLIERS
    n = sum(c is not None for k in report.outliers for c in k.cause)
    return f"{n} outlier(s) in {len(report.outliers)} kind(s) of collective; click a point for its timeline."


def outliers_figure(report):
    fig = outlier_figure.outliers(report)
    return fig if fig is not None else figures.placeholder(NO_OUTLIERS)


def outliers_style(report) -> dict:
    # Hidden, not absent, without outliers: the timeline's callback listens to its clicks.
    return {"height": f"{max(320, 260 * min(len(report.outliers), outlier_figure.MAX_KINDS))}px",
            "display": "block" if report.outliers else "none"}


def verdict_children(report) -> list:
    """The first card: the run's answer (headline), its causes as one bar and as rows with their levers, and a
    link to the culprit's timeline (the step where it cost the others most)."""
    v = report.verdict
    if v is None:
        return [html.B("No run verdict in this report (written before tracelens had one).")]
    children: list = [html.B(v.headline, id="verdict-headline", style={"fontSize": "1.15em"})]
    bar = figures.verdict_bar(report)
    if bar is not None:
        children.append(dcc.Graph(id="verdict-bar", figure=bar, style={"height": "140px"},
                                  config={"displayModeBar": False}))
    rows = figures.verdict_causes(report)
    if rows:
        head = ("cause", "ms per step", "of step", "ranks", "why")
        children.append(table(head, [[r[h] for h in head] for r in rows]))
        children.append(html.Ul([html.Li([html.I(f"Try ({r['cause']}): "), r["lever"]]) for r in rows
                                 if r["lever"]]))
    rank, step = figures.culprit_step(report)
    label = "" if rank is None else \
        f"Open rank {rank}'s timeline" + ("" if step is None else f" (step {step}, where it cost the others most)")
    # Always on the page (a callback's input must exist), shown only with a culprit whose step can be opened.
    children.append(html.Button(label or "no culprit", id="culprit-link", n_clicks=0,
                                style={"display": "inline-block" if rank is not None else "none"}))
    return children


def headline(report) -> list:
    return [html.Div([html.Div(k), html.B(v)], style=CARD) for k, v in figures.headline(report)]


def dimensions_children(report) -> list:
    """Exposed comm per parallelism dimension, when the run attributed any."""
    fig = figures.dimensions(report)
    return [] if fig is None else [dcc.Graph(id="dimensions", figure=fig, style={"height": "380px"})]


def findings_grid(report, severities=(), text: str = "") -> list[dict]:
    """The findings grid's rows; each carries ``row_id`` "rank|step|n", which a click hands back: the step is
    the one the click opens (a finding of a rank as a whole: where it cost most, ``figures.opened_step``)."""
    rows = figures.findings_rows(report, severities, text)
    return [{**r, "row_id": f"{r['rank']}|{r['opens']}|{n}"} for n, r in enumerate(rows)]


def step_options(report) -> list[dict]:
    return [{"label": "all steps", "value": "all"}] + [
        {"label": f"step {s}", "value": s} for s in figures.steps_of(report) if s is not None]


def compare_section(session) -> html.Div:
    """Run B against run A: with the session's Diff, what ``tracelens diff A B`` says (its answer first, the
    runs, their verdicts, the causes and the prediction checked, what changed most, its notes); then the
    per-rank and per-step deltas."""
    if len(session.runs) < 2:
        return html.Div()
    a, b = session.runs[0], session.runs[1]
    verdicts = [html.Div([html.B(f"run {r.name}: "), html.Span(", ".join(f"{k} {v}" for k, v in
                                                                         figures.headline(r.report)))])
                for r in (a, b)]
    return html.Div(style=SECTION, children=[
        html.H3(f"Run {b.name} vs run {a.name}"),
        *(diff_children(session.diff, (f"run {a.name} (before)", f"run {b.name} (after)"))
          if session.diff is not None else []),
        *verdicts,
        dcc.Graph(id="compare", figure=figures.compare(a.report, b.report, (a.name, b.name)),
                  style={"height": "440px"})])


def diff_children(d, names: tuple[str, str]) -> list:
    """The Diff as ``tracelens diff`` prints it, its cells the text renderer's (``diff_tables``)."""
    children: list = [
        html.Div(html.B(d.summary, style={"fontSize": "1.1em"}), id="compare-summary", style=VERDICT),
        html.Div([html.Div(line) for line in diff_tables.labels(d, names)], id="compare-labels"),
        table(diff_tables.SIDE_HEADERS + (diff_tables.CULPRIT_HEADER,), diff_tables.side_rows(d, names, culprit=True),
              {1, 2, 3, 4}, id="compare-runs"),
        html.Ul([html.Li(line) for line in diff_tables.verdicts(d, names)], id="compare-verdicts")]
    if d.causes:
        children.append(table(diff_tables.CAUSE_HEADERS, diff_tables.cause_rows(d), {1, 2, 3}, id="compare-causes"))
    children.append(html.Div([html.I("prediction checked: "), diff_tables.prediction_line(d)],
                             id="compare-prediction"))
    if d.changes:
        children += [html.H4(diff_tables.CHANGES_TITLE.capitalize()),
                     table(diff_tables.CHANGE_HEADERS, diff_tables.change_rows(d, CHANGE_NAME_WIDTH), {2, 3, 4, 5, 6},
                           id="compare-changes")]
    if d.notes:
        children.append(html.Ul([html.Li(f"note: {n}") for n in d.notes], id="compare-notes"))
    return children


def table(head, rows, numeric=frozenset(), **props) -> html.Table:
    """Rows of text under their headers; the ``numeric`` columns right-aligned."""
    def cell(tag, i, text):
        return tag(text, style={"padding": "2px 10px", "textAlign": "right" if i in numeric else "left"})
    return html.Table([html.Thead(html.Tr([cell(html.Th, i, h) for i, h in enumerate(head)])),
                       html.Tbody([html.Tr([cell(html.Td, i, c) for i, c in enumerate(r)]) for r in rows])], **props)


def history_section(session) -> html.Div:
    if not session.history:
        return html.Div()
    return html.Div(style=SECTION, children=[
        html.H3("History"),
        dcc.Graph(id="history", figure=figures.history(session.history), style={"height": "520px"}),
        html.Div(id="history-info", children="Click a point for its run.")])


def across_section(report, name: str | None = None) -> html.Div:
    """Wait vs transfer, the stragglers by arrival, the collective strip, busbw vs size and the transport
    verdict: shown when the Report has its ``cross_rank`` / ``transport`` sections. The run selector redraws
    it for the run chosen (``name``: that run's, said in the heading when there are several)."""
    return html.Div(id="across", style=SECTION, children=across_children(report, name))


def strip_step_options(report) -> list[dict]:
    """The strip's step choices: each step of its instances (a whole-trace window is "none"), then all."""
    steps = across_ranks.strip_steps(report) or []
    return [{"label": "whole trace" if s is None else f"step {s}", "value": "none" if s is None else s}
            for s in steps] + [{"label": "all steps", "value": "all"}]


def across_children(report, name: str | None = None) -> list | None:
    wait, bw, line = across_ranks.wait_transfer(report), across_ranks.busbw(report), across_ranks.transport_line(report)
    steps = across_ranks.strip_steps(report)
    if wait is None and bw is None and line is None and steps is None:
        return None
    children: list = [html.H3("Across ranks" + (f" (run {name})" if name else ""))]
    if line:
        children.append(html.Div(line, id="transport"))
    if wait is not None:
        children += [dcc.Graph(id="wait-transfer", figure=wait, style={"height": "440px"}),
                     dag.AgGrid(id="stragglers", rowData=across_ranks.straggler_rows(report), columnDefs=[
                         {"field": "rank", "width": 90}, {"field": "host"}, {"field": "late_count",
                                                                          "headerName": "arrived last"},
                         {"field": "matched"}, {"field": "wait_ms", "headerName": "wait (ms)",
                                                "valueFormatter": MS_FORMAT},
                         {"field": "transfer_ms", "headerName": "transfer (ms)", "valueFormatter": MS_FORMAT},
                         {"field": "exposed_wait_ms", "headerName": "exposed wait (ms)",
                          "valueFormatter": MS_FORMAT}],
                                defaultColDef=GRID, dashGridOptions={"pagination": True, "paginationPageSize": 20},
                                style={"height": "360px"})]
    if steps is not None:
        options = strip_step_options(report)
        first = options[0]["value"]
        children += [html.Label(["collective strip", dcc.Dropdown(id="strip-step", options=options, value=first,
                                                                    clearable=False, style={"width": "160px"})],
                                style={"display": "flex", "gap": "8px", "alignItems": "center"}),
                     dcc.Graph(id="strip", figure=across_ranks.strip(report, None if first == "none" else first),
                               style={"height": "440px"})]
    if bw is not None:
        children.append(dcc.Graph(id="busbw", figure=bw, style={"height": "440px"}))
    return children
