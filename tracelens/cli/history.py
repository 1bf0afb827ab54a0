"""``tracelens history``: add runs to the SQLite history that relative gates compare with, list and show them."""

from __future__ import annotations

import sys

import click

from ..errors import printable
from .report import report_for
from .terminal import (FILE_WIDTH, echo_fitted, emit, input_options, report_options, terminal_width,
                       steps_option, threshold_option)


@click.group("history", short_help="Keep past runs for relative gates.")
def history() -> None:
    """The run history database (SQLite) that relative gates compare with."""


def db_option(fn):
    return click.option("--db", required=True, metavar="DB", help="The history database (created on first add).")(fn)


@history.command("add", short_help="Add a run to the history database.")
@click.argument("paths", nargs=-1, required=True)
@db_option
@click.option("--label", required=True, help="A name to compare against later, e.g. main or the branch.")
@click.option("--commit", metavar="SHA", help="The commit the run was built from.")
@threshold_option
@input_options
@steps_option
def history_add(paths, db, label, commit, thresholds, comm_patterns, step_nvtx, no_cache, steps_from) -> None:
    """Add a run (trace folder, files, or a saved report.json) to the history database.

    Example:

        tracelens history add runs/ci-1234/ --db ci-history.db --label main --commit $GITHUB_SHA
    """
    report = report_for(paths, report_options(comm_patterns, step_nvtx, thresholds, no_cache, steps_from=steps_from))
    # lazy: sqlite3, pandas and msgspec, once the report's workers have forked
    from ..history_db import add_run, open_db
    from ..renderers.common import frac, pct

    with open_db(db, create=True) as handle:
        run_id = add_run(handle, report, label=label, commit=commit, source=printable(" ".join(paths), one_line=True))
    s = report.summary
    echo_fitted(f"added run {run_id} ({label}): {s.ranks} rank(s), {s.steps} step(s), overlap {pct(s.overlap_pct)}, "
                f"exposed {frac(s.exposed_comm_fraction)} -> {db}")


@history.command("list", short_help="List the newest runs.")
@db_option
@click.option("--label", help="Only runs with this label.")
@click.option("--limit", type=click.IntRange(1), default=20, show_default=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def history_list(db, label, limit, fmt) -> None:
    """List the newest runs in the history database.

    Example:

        tracelens history list --db ci-history.db --label main
    """
    # lazy: sqlite3, pandas and rich: not for --help
    from ..history_db import list_runs, open_db
    from ..renderers import history_rows as show

    with open_db(db, create=False) as handle:
        runs = list_runs(handle, label, limit)
    width = terminal_width(sys.stdout) or FILE_WIDTH
    emit(show.runs_json(runs) if fmt == "json" else show.runs_text(runs, width))


@history.command("show", short_help="Show one run, per rank and step.")
@click.argument("run_id", type=int)
@db_option
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
def history_show(run_id, db, fmt) -> None:
    """Show one run of the history database with its per-rank, per-step metrics.

    Example:

        tracelens history show 12 --db ci-history.db
    """
    # lazy: sqlite3, pandas and rich: not for --help
    from ..history_db import get_run, open_db, run_steps
    from ..renderers import history_rows as show

    with open_db(db, create=False) as handle:
        run, steps = get_run(handle, run_id), run_steps(handle, run_id)
    width = terminal_width(sys.stdout) or FILE_WIDTH
    emit(show.run_json(run, steps) if fmt == "json" else show.run_text(run, steps, width))
