"""``tracelens`` command line: one small module per command (``report``, ``export``, ``annotate``, ``gate``, ``history``,
``collect``, ``dashboard``, ``cache``, ``diff``), each parsing its options, calling :mod:`tracelens.api` and rendering; ``terminal`` holds what
they share. Here: the command group, the mapping of errors to exit codes, and the console script.

Nothing heavy (numpy, msgspec, rich, the parsers) is imported at module level of any of these modules:
``--help`` and option errors answer at once, and a report forks its workers before numpy loads
(tests/unit/test_startup_budget.py holds the budget).
"""

from __future__ import annotations

import importlib
import sys

import click

from .. import __version__
from .._speed import exit_without_teardown, one_blas_thread
from ..errors import EXIT_USAGE, TracelensError
from .terminal import FILE_WIDTH, echo_fitted, say, terminal_width, use_color

__all__ = ["AGGREGATE_CHOICES", "FILE_WIDTH", "PATTERN_CHOICES", "cli", "echo_fitted", "main", "run", "say",
           "terminal_width", "use_color"]

# Each command's module, imported when that command runs (or --help lists them all): a warm `tracelens
# report` does not import the collector, the dashboard, the gate or the history (bench/RESULTS.md, issue 35).
COMMANDS = {"report": "report", "collect": "collect", "export": "export", "annotate": "annotate", "gate": "gate",
            "history": "history", "dashboard": "dashboard", "cache": "cache", "diff": "diff"}


class _Commands(click.Group):
    """The command group, with each command loaded from its module on first use."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        return getattr(importlib.import_module(f".{COMMANDS[name]}", __name__), name)


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracelens")
def cli() -> None:
    """Is my communication hidden behind compute? Collect, report and gate overlap for PyTorch profiler
    and Nsight Systems traces."""


def __getattr__(name: str):
    if name in ("AGGREGATE_CHOICES", "PATTERN_CHOICES"):
        return getattr(importlib.import_module(".gate", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
