"""The interactions, each a plain function of the Session and the page's values (tested as functions), and
``register`` wiring them to the app. The page names a run by its index and a rank and step by their numbers;
no value from the browser is ever used as a path.

Every value a callback gets comes from a request, which anyone who can reach the port can write
(:mod:`.guard` checks the request's shape; the values are checked here): a value the page itself never sends
(a run, rank or step that is not there, a value of the wrong type) raises :class:`~.guard.Invalid`, which the
registered callback answers with no update; a click on something that is not a cell or a finding shows why
in the timeline's place. Nothing a callback raises reaches the server (see ``_answer``).
"""

from __future__ import annotations

import functools
import logging

from dash import Input, Output, State, ctx, no_update
from dash.exceptions import PreventUpdate

from tracelens.contract import SEVERITIES
from tracelens.errors import TracelensError
from tracelens.renderers import across_ranks, figures
from tracelens.renderers.common import ranges
from tracelens.renderers.timeline_figure import step_findings, timeline as timeline_figure

from . import layout
from .guard import Invalid, shown

log = logging.getLogger("tracelens.dashboard")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _step(value, steps):
    """The step selector's value as a step number (None: all steps, or a run without steps); ``steps``: the
    steps the selector offers."""
    if value is None or value == "all":
        return None
    if not _is_int(value) or value not in steps:
        raise Invalid(f"no step {shown(value)}")
    return value


def budget_figure(session, run, step, sort):
    report = session.run(run).report
    return figures.budget(report, _step(step, figures.steps_of(report)),
                          sort if isinstance(sort, str) and sort in figures.SORTS else "rank")


def heatmap_figure(session, run, metric):
    return figures.heatmap(session.run(run).report, metric if isinstance(metric, str) and metric in
                           figures.HEATMAP_METRICS else "exposed_comm_fraction")


def finding_rows(session, run, severities=(), text="") -> list[dict]:
    """The findings grid's rows; each carries ``row_id`` "rank|step|n", which a click hands back."""
    report = session.run(run).report
    if severities is not None and (not isinstance(severities, (list, tuple))
                                   or not all(isinstance(s, str) and s in SEVERITIES for s in severities)):
        raise Invalid(f"not severities: {shown(severities)}")
    if text is not None and not isinstance(text, str):
        raise Invalid(f"not a filter text: {shown(text)}")
    return layout.findings_grid(report, severities or (), text or "")


def _number(value) -> int:
    """A rank or step number as the heatmap or a finding's row id gives it: an integer within int64, or its
    digits as text (ValueError, TypeError or OverflowError for anything else: a bool, a fraction, NaN,
    infinity, a list)."""
    if isinstance(value, bool) or isinstance(value, float) and not value.is_integer():
        raise ValueError(f"not a number: {shown(value)}")
    if isinstance(value, str) and not value.strip().lstrip("-").isdigit():
        raise ValueError(f"not a number: {shown(value)}")
    number = int(value)
    if not -2**63 <= number < 2**63:
        raise ValueError(f"not a rank or step: {shown(value)}")
    return number


def selection_from_heatmap(click) -> tuple[int, int | None] | None:
    """(rank, step) of a clicked heatmap cell, or None for anything that is not one."""
    try:
        point = click["points"][0]
        return _number(point["y"]), None if point["x"] == "all" else _number(point["x"])
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):
        return None


def selection_from_outlier(click) -> tuple[int, int | None] | None:
    """(rank, step) of a clicked point of the outliers view (its customdata), or None."""
    try:
        rank, step = click["points"][0]["customdata"]
        return _number(rank), None if step == "all" else _number(step)
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):
        return None


def selection_from_finding(cell) -> tuple[int, int | None] | None:
    """(rank, step) of a clicked finding (its row_id), or None."""
    try:
        rank, step, _ = cell["rowId"].split("|")
        return _number(rank), None if step == "None" else _number(step)
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError):
        return None


def selection_of_culprit(session, run) -> tuple[int, int | None] | None:
    """(rank, step) of the run's culprit where it cost the others most (the verdict card's link), or None."""
    rank, step = figures.culprit_step(session.run(run).report)
    return None if rank is None else (rank, step)


def timeline_view(session, run, picked):
    """(figure, message) of the picked rank and step of the run; a message alone when it cannot be shown."""
    if picked is None:
        return figures.placeholder(layout.PICK), layout.PICK
    rank, step = picked
    why = _no_step(session, run, rank, step)
    if why:
        return figures.placeholder(why), why
    try:
        tl = session.timeline(run, rank, step)
    except (TracelensError, ValueError) as exc:
        why = f"No timeline for rank {rank}, step {step}: {exc}"
        return figures.placeholder(why), why
    report = session.run(run).report
    pins = step_findings(report, rank, step)
    where = "all" if step is None else step
    return timeline_figure(tl, pins, report), (f"Rank {rank}, step {where} ({tl.source}): {tl.shapes} intervals, "
                                       f"{len(pins)} finding(s) pinned.")


def _no_step(session, run, rank, step) -> str | None:
    """Why nothing opens for (rank, no step) in a rank drawn step by step (what a click on a finding of that
    rank as a whole gives when it names no step where it cost most); None otherwise."""
    try:
        report = session.run(run).report
    except Invalid:
        return None                     # the timeline's own error says so
    steps = next((sorted(s.step for s in r.steps if s.step is not None) for r in report.ranks
                  if r.rank == rank and r.steps and all(s.step is not None for s in r.steps)), None)
    if step is not None or steps is None:
        return None
    return (f"No step to open for rank {rank}: this finding is about the rank as a whole and names no step "
            f"where it cost most. Click a heatmap cell of rank {rank} (steps {ranges(steps)}) "
            f"to see one of its steps.")


def history_point(session, click) -> str:
    """Where a clicked history point's report comes from (its run, label, commit, source), to open it with
    ``tracelens dashboard SOURCE``; the run id is looked up among the rows the server was started with."""
    try:
        run_id = _number(click["points"][0]["customdata"][0])
    except (KeyError, IndexError, TypeError, ValueError, OverflowError):
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
    report = session.run(run).report
    if not (isinstance(step, str) and step in ("all", "none")):
        if not _is_int(step) or step not in (across_ranks.strip_steps(report) or ()):
            raise Invalid(f"no step {shown(step)} in the strip")
    fig = across_ranks.strip(report, None if step == "none" else step)
    return fig if fig is not None else figures.placeholder("No matched collectives with member times.")


def run_view(session, run):
    """What changes with the run selector: the verdict, headline cards, step choices, collectives rows,
    dimensions."""
    report = session.run(run).report
    return (layout.verdict_children(report), layout.headline(report), layout.step_options(report),
            figures.collectives_rows(report, layout.MAX_COLLECTIVES), layout.dimensions_children(report))


def _answer(fn):
    """The callback ``fn`` as registered: a value the page never sends (:class:`Invalid`) is answered with
    no update; anything else it raises is a bug, said in one line of the server's log (no traceback) and
    answered with no update too, so that no request ends in an HTTP 500."""
    @functools.wraps(fn)
    def call(*args):
        try:
            return fn(*args)
        except (Invalid, PreventUpdate):
            raise PreventUpdate from None
        except Exception as exc:            # noqa: BLE001 (the server's last line of defence)
            log.error("callback %s failed: %s: %s", fn.__name__.lstrip("_"), type(exc).__name__, exc)
            raise PreventUpdate from None
    return call


SHOW_TIMELINE = """function(info) {
    document.getElementById("timeline-section").scrollIntoView({block: "nearest", behavior: "smooth"});
    return window.dash_clientside.no_update;
}"""


def register(app, session) -> None:
    def on(*dependencies, **options):
        return lambda fn: app.callback(*dependencies, **options)(_answer(fn))

    @on(Output("budget", "figure"), Input("run", "value"), Input("step", "value"),
        Input("sort", "value"), prevent_initial_call=True)
    def _budget(run, step, sort):
        return budget_figure(session, run, step, sort)

    @on(Output("heatmap", "figure"), Input("run", "value"), Input("metric", "value"),
        prevent_initial_call=True)
    def _heatmap(run, metric):
        return heatmap_figure(session, run, metric)

    @on(Output("findings", "rowData"), Input("run", "value"), Input("severity", "value"),
        Input("find-text", "value"), prevent_initial_call=True)
    def _findings(run, severities, text):
        return finding_rows(session, run, severities, text)

    @on(Output("verdict", "children"), Output("headline", "children"), Output("step", "options"),
        Output("collectives", "rowData"), Output("dimensions-section", "children"), Input("run", "value"),
        prevent_initial_call=True)
    def _run(run):
        return run_view(session, run)

    @on(Output("outliers", "figure"), Output("outliers-info", "children"), Output("outliers", "style"),
        Input("run", "value"), prevent_initial_call=True)
    def _outliers(run):
        report = session.run(run).report
        return layout.outliers_figure(report), layout.outliers_info(report), layout.outliers_style(report)

    @on(Output("across", "children"), Input("run", "value"), prevent_initial_call=True)
    def _across(run):
        return across_view(session, run)

    @on(Output("strip", "figure"), Input("strip-step", "value"), State("run", "value"),
        prevent_initial_call=True)
    def _strip(step, run):
        return strip_figure(session, run, step)

    if session.history:
        @on(Output("history-info", "children"), Input("history", "clickData"), prevent_initial_call=True)
        def _history(click):
            return history_point(session, click)

    # A click that opens the timeline shows it: the section is scrolled into view (only as far as it takes) when
    # its line changes, which only the timeline's callback does. In the browser: the server has no scroll.
    app.clientside_callback(SHOW_TIMELINE, Output("timeline-shown", "data"), Input("timeline-info", "children"),
                            prevent_initial_call=True)

    @on(Output("timeline", "figure"), Output("timeline-info", "children"),
        Input("heatmap", "clickData"), Input("findings", "cellClicked"), Input("culprit-link", "n_clicks"),
        Input("outliers", "clickData"), State("run", "value"), prevent_initial_call=True)
    def _timeline(click, cell, culprit_clicks, outlier, run):
        if ctx.triggered_id == "culprit-link":
            picked = selection_of_culprit(session, run)
        elif ctx.triggered_id == "outliers":
            picked = selection_from_outlier(outlier)
        else:
            picked = selection_from_finding(cell) if ctx.triggered_id == "findings" else \
                selection_from_heatmap(click)
        if picked is None:
            return no_update, no_update
        return timeline_view(session, run, picked)
