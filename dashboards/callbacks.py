"""The interactions, each a plain function of the Session and the page's values (tested as functions), and
``register`` wiring them to the app. The page names a run by its index and a rank and step by their numbers;
no value from the browser is ever used as a path."""

from __future__ import annotations

from dash import Input, Output, State, ctx, no_update

from tracelens.errors import TracelensError
from tracelens.renderers import crossrank, figures
from tracelens.renderers.timeline import timeline as timeline_figure

from . import layout

PICK = "Click a heatmap cell (or a finding) to see that rank and step."


def _step(value):
    """The step selector's / heatmap's value as a step number (None: all steps, or a run without steps)."""
    if value in (None, "all"):
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"not a step: {value!r}")
    return int(value)


def budget_figure(session, run, step, sort):
    return figures.budget(session.run(run).report, _step(step), sort if sort in figures.SORTS else "rank")


def heatmap_figure(session, run, metric):
    return figures.heatmap(session.run(run).report, metric if metric in figures.HEATMAP_METRICS
                           else "exposed_comm_fraction")


def finding_rows(session, run, severities=(), text="") -> list[dict]:
    """The findings grid's rows; each carries ``row_id`` "rank|step|n", which a click hands back."""
    rows = figures.findings_rows(session.run(run).report, severities or (), text or "")
    return [{**r, "row_id": f"{r['rank']}|{r['step']}|{n}"} for n, r in enumerate(rows)]


def selection_from_heatmap(click) -> tuple[int, int | None] | None:
    """(rank, step) of a clicked heatmap cell, or None for anything that is not one."""
    try:
        point = click["points"][0]
        return int(point["y"]), None if point["x"] == "all" else int(point["x"])
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def selection_from_finding(cell) -> tuple[int, int | None] | None:
    """(rank, step) of a clicked finding (its row_id), or None."""
    try:
        rank, step, _ = str(cell["rowId"]).split("|")
        return int(rank), None if step == "None" else int(step)
    except (KeyError, TypeError, ValueError):
        return None


def timeline_view(session, run, picked):
    """(figure, message) of the picked rank and step of the run; a message alone when it cannot be shown."""
    if picked is None:
        return figures.placeholder(PICK), PICK
    rank, step = picked
    try:
        tl = session.timeline(run, rank, step)
    except (TracelensError, ValueError) as exc:
        why = f"No timeline for rank {rank}, step {step}: {exc}"
        return figures.placeholder(why), why
    report = session.run(run).report
    pins = [d for d in report.diagnoses if d.rank == rank and d.step == step]
    where = "all" if step is None else step
    return timeline_figure(tl, pins), (f"Rank {rank}, step {where} ({tl.source}): {tl.shapes} intervals, "
                                       f"{len(pins)} finding(s) pinned.")


def history_point(session, click) -> str:
    """Where a clicked history point's report comes from (its run, label, commit, source), to open it with
    ``tracelens dashboard SOURCE``; the run id is looked up among the rows the server was started with."""
    try:
        run_id = int(click["points"][0]["customdata"][0])
    except (KeyError, IndexError, TypeError, ValueError):
        return "Click a point for its run."
    row = next((r for r in session.history or () if r["id"] == run_id), None)
    if row is None:
        return f"No run {run_id} in the history."
    return (f"run {row['id']} ({row['label']}, commit {row.get('commit') or 'none'}, {row['created_at']}): "
            f"overlap {row['overlap_pct']}, exposed fraction {row['exposed_comm_fraction']}; its report: "
            f"tracelens dashboard {row.get('source') or '(source not recorded)'}")


def across_view(session, run):
    """The across-ranks section of the run chosen (its heading names the run when there are several)."""
    r = session.run(run)
    return layout.across_children(r.report, r.name if len(session.runs) > 1 else None)


def strip_figure(session, run, step):
    """The collective strip of the run in the step chosen ("all", "none": the whole-trace window, a number)."""
    if step not in ("all", "none"):
        step = _step(step)
    fig = crossrank.strip(session.run(run).report, None if step == "none" else step)
    return fig if fig is not None else figures.placeholder("No matched collectives with member times.")


def run_view(session, run):
    """What changes with the run selector: headline cards, step choices, collectives rows, dimensions."""
    report = session.run(run).report
    return (layout.headline(report), layout.step_options(report),
            figures.collectives_rows(report, layout.MAX_COLLECTIVES), layout.dimensions_children(report))


def register(app, session) -> None:
    @app.callback(Output("budget", "figure"), Input("run", "value"), Input("step", "value"),
                  Input("sort", "value"), prevent_initial_call=True)
    def _budget(run, step, sort):
        return budget_figure(session, run, step, sort)

    @app.callback(Output("heatmap", "figure"), Input("run", "value"), Input("metric", "value"),
                  prevent_initial_call=True)
    def _heatmap(run, metric):
        return heatmap_figure(session, run, metric)

    @app.callback(Output("findings", "rowData"), Input("run", "value"), Input("severity", "value"),
                  Input("find-text", "value"), prevent_initial_call=True)
    def _findings(run, severities, text):
        return finding_rows(session, run, severities, text)

    @app.callback(Output("headline", "children"), Output("step", "options"), Output("collectives", "rowData"),
                  Output("dimensions-section", "children"), Input("run", "value"), prevent_initial_call=True)
    def _run(run):
        return run_view(session, run)

    @app.callback(Output("across", "children"), Input("run", "value"), prevent_initial_call=True)
    def _across(run):
        return across_view(session, run)

    @app.callback(Output("strip", "figure"), Input("strip-step", "value"), State("run", "value"),
                  prevent_initial_call=True)
    def _strip(step, run):
        return strip_figure(session, run, step)

    if session.history:
        @app.callback(Output("history-info", "children"), Input("history", "clickData"), prevent_initial_call=True)
        def _history(click):
            return history_point(session, click)

    @app.callback(Output("timeline", "figure"), Output("timeline-info", "children"),
                  Input("heatmap", "clickData"), Input("findings", "cellClicked"), State("run", "value"),
                  prevent_initial_call=True)
    def _timeline(click, cell, run):
        picked = selection_from_finding(cell) if ctx.triggered_id == "findings" else selection_from_heatmap(click)
        if picked is None:
            return no_update, no_update
        return timeline_view(session, run, picked)
