"""``tracelens dashboard``: analyse the inputs through ``api.report`` (the same Report as ``tracelens report``)
and serve the Dash app of ``tracelens.dashboards`` on them."""

from __future__ import annotations

import importlib.util

import click

from .. import api
from ..errors import UsageError
from .report import report_for
from .terminal import input_options, report_options, steps_option, threshold_option

INSTALL_HINT = "pip install 'tracelens-overlap[dashboard]'"
NEEDS = ("dash", "plotly", "dash_ag_grid")


def check_installed() -> None:
    """A usage error (exit 2, one line) saying how to install the extra when a part of it is missing."""
    missing = [m for m in NEEDS if importlib.util.find_spec(m) is None]
    if missing:
        raise UsageError(f"the dashboard needs {', '.join(missing)}: {INSTALL_HINT}")


@click.command("dashboard", short_help="Serve the overlap dashboard in a browser.")
@click.argument("paths", nargs=-1, required=True)
@click.option("--compare", "compare", multiple=True, metavar="PATH",
              help="A second run (B, after a change) to compare with the first (A, before it): what tracelens diff "
                   "A B says, and per-rank and per-step deltas (repeatable: its files, folders or report.json).")
@click.option("--history", "history_db", metavar="DB",
              help="Also show overlap and exposed fraction over time from this history database (tracelens "
                   "history add).")
@click.option("--label", metavar="LABEL", help="With --history: only the runs of this label.")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (anything but a loopback address is reachable from other machines).")
@click.option("--port", type=click.IntRange(0, 65535), default=8050, show_default=True, help="Port to listen on.")
@click.option("--open", "open_browser", is_flag=True, help="Open the dashboard in a web browser.")
@threshold_option
@input_options
@steps_option
def dashboard(paths, compare, history_db, label, host, port, open_browser, thresholds, comm_patterns,
              step_nvtx, no_cache, steps_from) -> None:
    """Serve the overlap dashboard for trace files, run directories or saved report.json files: rank time
    budget, rank x step heatmap, step timeline, findings, collectives (and run A vs B with --compare, the
    history with --history).

    Example:

        tracelens dashboard runs/ddp_bs32/ --compare runs/ddp_bs64/
    """
    check_installed()
    from ..dashboards import Run, Session, serve    # lazy: the dashboard extra, checked for just above

    past = api.history_runs(history_db, label) if history_db else None

    options = report_options(comm_patterns, step_nvtx, thresholds, no_cache, steps_from=steps_from)
    runs = [Run("A", report_for(paths, options))]
    diff = None
    if compare:
        runs.append(Run("B", report_for(compare, options)))
        # A is the run before the change, B the run after it, as `tracelens diff A B` reads them.
        diff = api.compare_reports(runs[0].report, runs[1].report, before_label=" ".join(paths),
                                   after_label=" ".join(compare))
    serve(Session(runs, tuple(comm_patterns), step_nvtx, history=past, diff=diff), host=host, port=port,
          open_browser=open_browser)
