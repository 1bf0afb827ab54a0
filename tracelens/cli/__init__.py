"""``tracelens`` command line: one small module per command (``report``, ``export``, ``annotate``, ``gate``, ``history``,
``collect``, ``dashboard``, ``cache``), each parsing its options, calling :mod:`tracelens.api` and rendering; ``terminal`` holds what
they share. Here: the command group, the mapping of errors to exit codes, and the console script.

Nothing heavy (numpy, msgspec, rich, the parsers) is imported at module level of any of these modules:
``--help`` and option errors answer at once, and a report forks its workers before numpy loads
(tests/unit/test_startup_budget.py holds the budget).
"""

from __future__ import annotations

import sys

import click

from .. import __version__
from .._speed import exit_without_teardown, one_blas_thread
from ..errors import EXIT_USAGE, TracelensError
from . import annotate, cache, collect, dashboard, export, gate, history, report
from .gate import AGGREGATE_CHOICES, PATTERN_CHOICES
from .terminal import FILE_WIDTH, echo_fitted, say, terminal_width, use_color

__all__ = ["AGGREGATE_CHOICES", "FILE_WIDTH", "PATTERN_CHOICES", "cli", "echo_fitted", "main", "run", "say",
           "terminal_width", "use_color"]


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracelens")
def cli() -> None:
    """Is my communication hidden behind compute? Collect, report and gate overlap for PyTorch profiler
    and Nsight Systems traces."""


for _command in (report.report, collect.collect, export.export, annotate.annotate, gate.gate, history.history,
                 dashboard.dashboard, cache.cache):
    cli.add_command(_command)
del _command


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes become one line on stderr and a documented exit code."""
    try:
        code = cli.main(args=argv, prog_name="tracelens", standalone_mode=False)
    except TracelensError as exc:
        click.echo(f"tracelens: error: {exc}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("tracelens: aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE if exc.exit_code == 2 else exc.exit_code
    except BrokenPipeError:
        return 0
    return code if isinstance(code, int) else 0


def run() -> None:
    """Console-script wrapper: exit with main()'s code, skipping the interpreter's teardown (tracelens/_speed.py
    says what that buys); output is flushed first. ``main`` returns, for callers that go on."""
    one_blas_thread()
    code = main()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), a full disk (reported already), a closed stream
            pass
    exit_without_teardown(code)
