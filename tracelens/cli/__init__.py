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
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()              # `tracelens`, `tracelens history` alone: the help is the answer
        return EXIT_USAGE
    except click.ClickException as exc:
        click.echo(f"tracelens: error: {usage_line(exc, sys.argv[1:] if argv is None else argv)}", err=True)
        return EXIT_USAGE if exc.exit_code == 2 else exc.exit_code
    except BrokenPipeError:
        return 0
    return code if isinstance(code, int) else 0


def usage_line(exc: click.ClickException, argv: list[str]) -> str:
    """click's error as one line, in the words of every other error (docs/errors.md): the command, what is
    wrong (for an unknown command, the commands there are; for a number, the range it must be in) and where
    the help is. click's own answer is a usage block of four lines, whose first two repeat what --help says
    and push the error out of a short CI log's view."""
    ctx = getattr(exc, "ctx", None)
    what = " ".join(exc.format_message().split()).rstrip(".")
    if what[1:2].islower():
        what = what[0].lower() + what[1:]          # "invalid value for ...", but 'PATHS...' stays as it is
    kind = getattr(getattr(exc, "param", None), "type", None)
    if hasattr(kind, "_describe_range") and what.endswith(" range"):
        # click: "'abc' is not a valid integer range", which names neither the kind nor the range.
        what = f"{what.removesuffix(' range')} ({kind._describe_range()})"
    if isinstance(getattr(ctx, "command", None), click.Group) and what.startswith("no such command"):
        what += f" (commands: {', '.join(ctx.command.list_commands(ctx))})"
    # A value missing after the last option ("--format" at the end) is raised with no context at all.
    path = ctx.command_path if ctx is not None else _command_path(argv)
    where = path.removeprefix("tracelens").strip()
    return (f"{where}: " if where else "") + f"{what}; see '{path} --help'"


def _command_path(argv: list[str]) -> str:
    """``tracelens history add`` for ``["history", "add", ...]``: the commands named before the first word
    that is none."""
    path, group = ["tracelens"], cli
    for word in argv:
        command = group.get_command(None, word) if isinstance(group, click.Group) else None
        if command is None:
            break
        path.append(word)
        group = command
    return " ".join(path)


def run() -> None:
    """Console-script wrapper: exit with main()'s code, skipping the interpreter's teardown (tracelens/_speed.py
    says what that buys); output is flushed first. ``main`` returns, for callers that go on."""
    one_blas_thread()
    code = main()
    for stream in (sys.stdout, sys.stderr):
        if stream is None:      # started with that descriptor closed (`>&-`): Python gives it no stream
            continue
        try:
            stream.flush()
        except (OSError, ValueError):  # a reader that went away (| head), a full disk (reported already), a closed stream
            pass
    exit_without_teardown(code)
