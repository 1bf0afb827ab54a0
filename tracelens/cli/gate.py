"""``tracelens gate``: pass or fail a run against the rules of flags and config file, for CI."""

from __future__ import annotations

import importlib.util
import sys

import click

from .. import api, outputs
from ..errors import EXIT_GATE, EXIT_OK, UsageError, printable
from ..renderers import render
from .terminal import (FILE_WIDTH, color_option, emit, executor_args, executor_options, input_options, progress,
                       steps_option, terminal_width, threshold_option, use_color, writing)

# Kept here (not imported from tracelens.gating, which loads pandas) so `--help` stays fast; tests check they
# match tracelens.gating's PATTERNS and AGGREGATES.
PATTERN_CHOICES = ("sawtooth", "two-phase", "backlog", "serialized", "partial", "no-comm", "mixed")
AGGREGATE_CHOICES = ("median", "mean", "p90", "worst")


@click.command("gate", short_help="Pass or fail a run against overlap limits.")
@click.argument("paths", nargs=-1, required=True)
@click.option("--min-overlap-pct", type=float, metavar="PCT", help="Fail a rank whose overlap % is below PCT.")
@click.option("--max-exposed-fraction", type=float, metavar="F",
              help="Fail a rank whose exposed-comm fraction of step time is above F (0..1).")
@click.option("--max-exposed-ms", type=float, metavar="MS", help="Fail a rank with more exposed comm per step.")
@click.option("--no-critical", is_flag=True, default=None, help="Fail a rank with any critical diagnosis.")
@click.option("--require-pattern", multiple=True, type=click.Choice(PATTERN_CHOICES), metavar="PATTERN",
              help="Fail a rank whose overlap pattern is not PATTERN (repeatable: any of them), e.g. sawtooth.")
@click.option("--baseline", metavar="REPORT", help="Compare with this report.json (or trace folder).")
@click.option("--history", metavar="DB", help="Compare with the latest run labelled --against in this database.")
@click.option("--against", metavar="LABEL", help="The history label to compare with, e.g. main.")
@click.option("--max-overlap-drop", type=float, metavar="POINTS",
              help="Fail a rank whose overlap % fell more than POINTS below the baseline's.")
@click.option("--max-exposed-rise", type=float, metavar="F",
              help="Fail a rank whose exposed fraction rose more than F above the baseline's.")
@click.option("--aggregate", type=click.Choice(AGGREGATE_CHOICES), default=None,
              help="How a rank's steps become one number (default median).")
@click.option("--config", "config_path", metavar="FILE",
              help="Read rules from FILE (tracelens.toml or pyproject.toml); default: the nearest one.")
@click.option("--no-config", is_flag=True, help="Ignore tracelens.toml / pyproject.toml.")
@click.option("--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True)
@click.option("--junit", metavar="FILE", help="Write JUnit XML (a testcase per rule and rank) to FILE.")
@click.option("--html", "html_path", metavar="FILE",
              help="Also write the run's report as one self-contained HTML file (needs the dashboard extra).")
@click.option("--summary-md", metavar="FILE", help="Append a Markdown summary to FILE (e.g. $GITHUB_STEP_SUMMARY).")
@color_option
@threshold_option
@input_options
@steps_option
@executor_options
def gate(paths, config_path, no_config, fmt, junit, html_path, summary_md, color, thresholds, comm_patterns, step_nvtx,
         no_cache, steps_from, executor, workers, scheduler, **rules):
    """Fail (exit 1) when overlap regresses: absolute limits, or limits relative to a baseline.

    Every rule is applied per rank to the median (--aggregate) of its steps. Rules may also live in
    [tool.tracelens.gate] of pyproject.toml or [gate] of tracelens.toml; flags override them.

    Example:

    \b
        tracelens gate runs/ci-1234/ --history ci.db --against main \\
            --max-overlap-drop 2 --junit gate.xml
    """
    if config_path and no_config:
        raise UsageError("--config and --no-config exclude each other")
    on_report = _html_writer(html_path) if html_path else None
    run_on = executor_args(executor, workers, scheduler)
    with progress(color, fmt == "json") as bar:
        result = api.gate(paths, rules=rules, config=config_path, use_config=not no_config, thresholds=thresholds,
                          comm_patterns=comm_patterns, step_nvtx=step_nvtx, steps_from=steps_from, on_file=bar,
                          on_done=bar.done if bar else None, on_report=on_report,
                          cache=False if no_cache else None, **run_on)
    from ..renderers import gate_outcome as show    # lazy: msgspec, after the report's workers forked

    if junit:
        with writing(junit):
            outputs.write_bytes(junit, show.junit(result))
    if summary_md:
        with writing(summary_md):
            outputs.append_text(summary_md, printable(show.markdown(result)))
    if fmt == "json":
        emit(show.json(result))
    else:
        colored = use_color(color, sys.stdout)
        emit(show.text(result, color=colored, width=terminal_width(sys.stdout) or FILE_WIDTH), colored)
    return EXIT_OK if result.passed else EXIT_GATE


def _html_writer(path: str):
    """Writes the run's Report as HTML to ``path``; a missing plotly is said before the (slow) analysis."""
    from ..renderers.html import INSTALL_HINT       # lazy: numpy and the figures, only with --html

    if importlib.util.find_spec("plotly") is None:
        raise UsageError(f"--html needs plotly: {INSTALL_HINT}")

    def write(rep) -> None:
        with writing(path):
            outputs.write_text(path, printable(render(rep, "html")))
    return write
