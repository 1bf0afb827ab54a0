"""``tracelens report``: the Report of a run (or a saved report.json read back) as text, JSON or Markdown."""

from __future__ import annotations

import click

from .. import api
from ..options import ReportOptions
from .terminal import (color_option, executor_options, fitting, input_options, progress,
                       report_options, steps_option, threshold_option, write)


def report_for(paths, options: ReportOptions, color=None, quiet: bool = False):
    """The Report for the inputs (a saved ``report.json`` is read back), with progress on a terminal (unless
    ``quiet``); ``options``: :func:`.terminal.report_options`."""
    with progress(color, quiet) as bar:
        return api.report_with(paths, options, on_file=bar, on_done=bar.done if bar else None)


@click.command("report", short_help="Report overlap per rank and step, with diagnoses.")
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown", "html"]), default="text",
              show_default=True, help="Output format.")
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of standard output.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--top", type=click.IntRange(0), default=10, show_default=True,
              help="How many of the most exposed collectives to list (text/markdown); identical ones (same "
                   "rank, kernel, op and size) are one row.")
@click.option("--rank", "one_rank", type=int, metavar="N",
              help="Text/Markdown: rank N's step table and findings alone, each finding as that rank's own.")
@click.option("--ranks", "ranks_shown", type=click.Choice(["auto", "all"]), default="auto", show_default=True,
              help="Text/Markdown: past 16 ranks, auto shows the step columns' distribution over ranks and the 8 "
                   "most exposed ranks' tables; all shows every rank's.")
@click.option("--steps", "steps_shown", type=click.Choice(["auto", "all"]), default="auto", show_default=True,
              help="Text/Markdown: past 50 steps, auto shows each column's min, median, p90 and max over a rank's "
                   "steps and its 5 steps with the most exposed communication; all shows every step's row.")
@color_option
@threshold_option
@input_options
@steps_option
@executor_options
def report(paths, fmt, output, force, top, one_rank, ranks_shown, steps_shown, color, thresholds, comm_patterns,
           step_nvtx, no_cache, steps_from, executor, workers, scheduler) -> None:
    """Report overlap per rank and step, with diagnoses, for trace files, directories or globs
    (or re-render a saved JSON report).

    Example:

        tracelens report runs/ddp_bs32/ --format markdown -o summary.md
    """
    options = report_options(comm_patterns, step_nvtx, thresholds, no_cache, executor, workers, scheduler, steps_from)
    width, colored = fitting(output, color)
    # No progress bar beside JSON: its readers are scripts, which want nothing on the terminal but errors.
    with progress(color, fmt == "json") as bar:
        text = api.rendered_with(paths, options, fmt, on_file=bar, on_done=bar.done if bar else None,
                                 color=colored, width=width, top=top, rank=one_rank, every=ranks_shown == "all",
                                 every_step=steps_shown == "all")
    write(text, output, force, colored)
