"""What every command shares: the terminal (width, colour, progress, wrapped messages), writing outputs, and
the options that several commands take. Nothing heavy at module level: ``--help`` imports this module."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

import click

from .. import outputs
from ..errors import UsageError, printable
from ..options import ReportOptions
from ..renderers import render

# Text that goes to a file, or to a pipe without COLUMNS, has no terminal to fit: the roomy layout.
FILE_WIDTH = 160


def terminal_width(stream) -> int | None:
    """The width to fit for text written to ``stream``: COLUMNS when set, else the terminal's size (through
    the standard library); None for a file or pipe without COLUMNS."""
    cols = os.environ.get("COLUMNS", "")
    if cols.isdigit() and int(cols) > 0:
        return int(cols)
    if not _isatty(stream):
        return None
    if stream is sys.stdout:
        import shutil   # lazy: only for a terminal; --help and a piped report never need it

        return shutil.get_terminal_size((80, 24)).columns
    try:
        return os.get_terminal_size(stream.fileno()).columns or 80
    except (AttributeError, OSError, ValueError):
        return 80


def use_color(flag: bool | None, stream) -> bool:
    """--color / --no-color when given; else colour on a terminal, unless NO_COLOR is set (no-color.org) or
    the terminal is dumb."""
    if flag is not None:
        return flag
    return _isatty(stream) and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


def _isatty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def say(message: str) -> None:
    """A ``tracelens: ...`` line on stderr, wrapped at the terminal's width (or COLUMNS); a log file
    without COLUMNS gets it whole, for grep."""
    echo_fitted(message, err=True)


def echo_fitted(message: str, err: bool = False) -> None:
    """One message, wrapped (continuation lines indented) to fit the terminal it goes to."""
    message = printable(message)
    width = terminal_width(sys.stderr if err else sys.stdout)
    if width and len(message) > width:
        import textwrap     # lazy: only for a message wider than its terminal

        message = textwrap.fill(message, width, subsequent_indent="    ", break_on_hyphens=False)
    click.echo(message, err=err)


@contextmanager
def progress(color=None, quiet: bool = False):
    """``on_file`` for the library's loaders: a progress bar on stderr when it is a terminal and there are
    several files; None otherwise (quiet in logs and pipes, and when ``quiet``: JSON output). Its ``done``
    (``api.report``'s ``on_done``) counts the files, ranks and bytes read.

    rich is imported on the first file, not here: the loaders start their workers before they parse, and an
    import here would delay that start on every report (bench/RESULTS.md, "progress bar")."""
    if quiet or not _isatty(sys.stderr):
        yield None
        return
    bar = _Bar(color)
    try:
        yield bar
    finally:
        bar.stop()


class _Bar:
    """The progress bar, started on the first of several files."""

    def __init__(self, color) -> None:
        self.color = color
        self.bar = self.task = None

    def _start(self, total: int) -> bool:
        if total < 2:
            return False
        if self.bar is None:
            # lazy: rich, once a bar is drawn: after the report's workers forked
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn

            console = Console(stderr=True, width=terminal_width(sys.stderr),
                              no_color=not use_color(self.color, sys.stderr))
            self.bar = Progress(TextColumn("reading {task.description}"), BarColumn(),
                                TextColumn("{task.completed}/{task.total} files"), TextColumn("{task.fields[ranks]}"),
                                TextColumn("{task.fields[size]}"), console=console, transient=True)
            self.bar.start()
            self.task = self.bar.add_task("traces", total=total, ranks="", size="")
        return True

    def __call__(self, path: Path, n: int, total: int) -> None:
        if self._start(total):
            self.bar.update(self.task, description=printable(path.name, one_line=True), completed=n - 1)

    def done(self, tally) -> None:
        """After each file: ``tally`` has files, ranks and bytes done (``executors.Tally``)."""
        if self._start(tally.files):
            self.bar.update(self.task, completed=tally.files_done,
                            description=printable(Path(tally.last).name, one_line=True),
                            ranks=f"{tally.ranks_done} ranks",
                            size=f"{_mib(tally.bytes_done)}/{_mib(tally.bytes)} MiB")

    def stop(self) -> None:
        if self.bar is not None:
            self.bar.stop()


def _mib(n: int) -> str:
    return f"{n / 2**20:,.0f}" if n >= 10 * 2**20 else f"{n / 2**20:,.1f}"


# ------------------------------------------------------------------------------------------------ outputs

def show(rep, fmt: str = "text", output: str | None = None, force: bool = False, top: int = 10,
         color: bool | None = None, rank: int | None = None, every: bool = False, every_step: bool = False) -> None:
    """Render a report to standard output (as wide as the terminal, coloured there) or to a file."""
    width, colored = fitting(output, color)
    write(render(rep, fmt, color=colored, width=width, top=top, rank=rank, every=every, every_step=every_step),
          output, force, colored)


def fitting(output: str | None, color: bool | None) -> tuple[int, bool]:
    """(width, colour) of a rendering for ``output``: standard output (None or ``-``) as wide as the terminal
    and coloured there, a file FILE_WIDTH wide and coloured only when asked."""
    stream = sys.stdout if output in (None, "-") else None
    width = (terminal_width(stream) if stream else None) or FILE_WIDTH
    return width, (use_color(color, stream) if stream else bool(color))


def write(text: str, output: str | None, force: bool, color: bool = False) -> None:
    """``text`` to standard output (``None`` or ``-``) or to the file ``output``, which must not exist
    unless ``force``."""
    if output is None or output == "-":
        emit(text, color)
        return
    out = Path(output)
    if out.is_dir():
        raise UsageError("cannot write output: is a directory (name a file)", path=output)
    with writing(output):
        if out.exists() and not out.is_file():
            # A device or pipe (/dev/stdout, a FIFO), through a link or not, is written to, as a shell would.
            outputs.write_device(out, printable(text))
            return
        # A file or a link to one is replaced, never written through (tracelens/outputs.py).
        if os.path.lexists(out) and not force:
            raise UsageError("output file exists (use --force to overwrite)", path=output)
        outputs.write_text(out, printable(text))


def emit(text: str, color: bool = False) -> None:
    """``text`` to standard output; a full disk or a closed terminal is one line, not a traceback (a reader
    that went away, ``| head``, is not an error: the CLI's BrokenPipeError handling ends quietly)."""
    try:
        click.echo(printable(text), nl=False, color=color)   # click would strip the escapes going into a pipe
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise UsageError(f"cannot write output: {exc.strerror or exc}", path="standard output") from None


@contextmanager
def writing(path):
    """An output that cannot be written (no such folder, no permission, a folder where a file goes) is the
    user's to fix: a usage error naming it, not a traceback."""
    try:
        yield
    except OSError as exc:
        raise UsageError(f"cannot write output: {exc.strerror or exc}", path=str(path)) from None


# ------------------------------------------------------------------------------------------ shared options

def color_option(fn):
    return click.option("--color/--no-color", "color", default=None,
                        help="Colour the output (default: on a terminal, unless NO_COLOR is set).")(fn)


def input_options(fn):
    """Options that change how traces are read (shared by every command that loads traces)."""
    fn = click.option("--no-cache", is_flag=True,
                      help="Parse every trace again: neither read nor fill the warm cache (tracelens cache info; "
                           "TRACELENS_NO_CACHE=1 does the same).")(fn)
    fn = click.option("--step-nvtx", metavar="REGEX",
                      help="Steps are the NVTX ranges (nsys) or annotations (Kineto) whose name matches REGEX, "
                           "instead of ProfilerStep#N; a group of digits in REGEX numbers them.")(fn)
    return click.option("--comm-pattern", "comm_patterns", multiple=True, metavar="REGEX",
                        help="Also treat kernels whose name matches REGEX as communication (repeatable).")(fn)


def folder_output(files: str, earlier: str):
    """``-o DIR`` and ``--force`` of a command that writes its files into a folder: ``files``, what it writes
    there; ``earlier``, what ``--force`` overwrites."""
    def options(fn):
        fn = click.option("--force", is_flag=True,
                          help=f"Overwrite {earlier} in DIR (other files there are never touched).")(fn)
        return click.option("-o", "--output", "out_dir", required=True, metavar="DIR", help=f"Folder for {files}.")(fn)
    return options


def threshold_option(fn):
    return click.option("--threshold", "thresholds", multiple=True, metavar="NAME=VALUE",
                        help="Change a diagnosis threshold, e.g. two_phase_min_tail=0.7 (repeatable; names and "
                             "defaults in docs/metrics.md).")(fn)


def executor_options(fn):
    """Where the files are read and analysed: here, or on Dask workers (``api.report``'s executor)."""
    fn = click.option("--scheduler", metavar="ADDRESS",
                      help="With --executor dask: the scheduler of a running Dask cluster (tcp://host:8786); its "
                           "workers must see the trace files at the same paths.")(fn)
    fn = click.option("--workers", type=click.IntRange(1), metavar="N",
                      help="With --executor dask: worker processes of the local cluster (default: one per core).")(fn)
    return click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
                        help="Read and analyse the files here, or on Dask workers (pip install "
                             "'tracelens-overlap[dask]'); file by file either way.")(fn)


def executor_args(executor: str, workers: int | None, scheduler: str | None) -> dict:
    """The executor options as ``api.report`` keywords; --workers and --scheduler need --executor dask."""
    if executor != "dask" and (workers or scheduler):
        raise UsageError(f"{'--workers' if workers else '--scheduler'} needs --executor dask")
    if workers and scheduler:
        raise UsageError("--workers and --scheduler exclude each other (a running cluster has its own workers)")
    return {"executor": executor, "workers": workers, "scheduler": scheduler}


def steps_option(fn):
    """Where a rank's steps come from (commands that analyse traces)."""
    return click.option("--steps-from", type=click.Choice(["auto", "markers", "inferred", "whole"]), default="auto",
                        show_default=True,
                        help="Steps from the ProfilerStep or --step-nvtx markers, inferred from the repeating device "
                             "work, or the whole capture as one; auto: markers, else inferred, else whole.")(fn)


def report_options(comm_patterns=(), step_nvtx: str | None = None, thresholds=(), no_cache: bool = False,
                   executor: str = "local", workers: int | None = None, scheduler: str | None = None,
                   steps_from: str = "auto") -> ReportOptions:
    """The flags of a command that reads traces, as the one value ``api.report_with`` takes. Every command
    reads the thresholds of the config file (file < environment < flags)."""
    return ReportOptions(comm_patterns=tuple(comm_patterns), step_pattern=step_nvtx, steps_from=steps_from,
                         thresholds=tuple(thresholds),
                         use_config=True, cache=False if no_cache else None,
                         **executor_args(executor, workers, scheduler))
