"""``tracelens diff``: two runs compared, and whether what BEFORE's verdict predicted for the change held."""

from __future__ import annotations

import click

from .. import api
from .terminal import color_option, fitting, input_options, progress, report_options, steps_option, \
    threshold_option, write


@click.command("diff", short_help="Compare two runs; check what the verdict predicted.")
@click.argument("before", nargs=1)
@click.argument("after", nargs=1)
@click.option("--format", "fmt", type=click.Choice(["text", "markdown", "json"]), default="text",
              show_default=True, help="Output format (JSON: schema tracelens.diff/1).")
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of standard output.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@color_option
@threshold_option
@input_options
@steps_option
def diff(before, after, fmt, output, force, color, thresholds, comm_patterns, step_nvtx, no_cache,
         steps_from) -> None:
    """Compare the run BEFORE a change with the run AFTER it (each a trace folder, a trace file or a saved
    report.json): their step times, each cause's cost and the culprit, what BEFORE's verdict predicted
    the change would save against what AFTER shows, and the kernels, collectives and idle time that got
    faster or slower.

    Example:

        tracelens diff runs/slow-rank/ runs/fixed/ --format markdown -o diff.md
    """
    options = report_options(comm_patterns, step_nvtx, thresholds, no_cache, steps_from=steps_from)
    width, colored = fitting(output, color)
    with progress(color, fmt == "json") as bar:
        result = api.diff(before, after, options=options, on_file=bar)
    from ..renderers.diff_tables import render_diff      # lazy: rich, after the reports

    write(render_diff(result, fmt, color=colored, width=width), output, force, colored)
