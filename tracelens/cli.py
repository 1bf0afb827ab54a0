"""``tracelens`` command line: a thin shell over the library (load -> analyze -> render)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from . import __version__
from .errors import EXIT_USAGE, TracelensError, UsageError


def _progress_loader(paths, comm_patterns, step_nvtx=None):
    """Load with a progress bar on stderr when it is a terminal."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn

    from .parsers import discover, load_files

    files = discover(paths)
    console = Console(stderr=True)
    if not console.is_terminal or len(files) < 2:
        return load_files(files, comm_patterns, step_pattern=step_nvtx)
    with Progress(TextColumn("parsing {task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                  console=console, transient=True) as bar:
        task = bar.add_task("traces", total=len(files))

        def step(path: Path) -> None:
            bar.update(task, description=path.name, advance=1)

        return load_files(files, comm_patterns, on_file=step, step_pattern=step_nvtx)


def _write(text: str, output: str | None, force: bool) -> None:
    if output is None or output == "-":
        click.echo(text, nl=False)
        return
    out = Path(output)
    if out.exists() and not force:
        raise UsageError("output file exists (use --force to overwrite)", path=output)
    out.write_text(text, encoding="utf-8")


def input_options(fn):
    """Options that change how traces are read (shared by every command that loads traces)."""
    fn = click.option("--step-nvtx", metavar="REGEX",
                      help="Steps are the NVTX ranges (nsys) or annotations (Kineto) whose name matches REGEX, "
                           "instead of ProfilerStep#N; a group of digits in REGEX numbers them.")(fn)
    return click.option("--comm-pattern", "comm_patterns", multiple=True, metavar="REGEX",
                        help="Also treat kernels whose name matches REGEX as communication (repeatable).")(fn)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracelens")
def cli() -> None:
    """Is my communication hidden behind compute? Overlap reports from PyTorch profiler traces."""


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("--format", "fmt", type=click.Choice(["text", "json", "markdown"]), default="text",
              show_default=True, help="Output format.")
@click.option("-o", "--output", metavar="FILE", help="Write to FILE instead of standard output.")
@click.option("--force", is_flag=True, help="Overwrite an existing output file.")
@click.option("--top", type=click.IntRange(0), default=10, show_default=True,
              help="How many of the most exposed collectives to list (text/markdown).")
@click.option("--threshold", "thresholds", multiple=True, metavar="NAME=VALUE",
              help="Change a diagnosis threshold, e.g. two_phase_min_tail=0.7 (repeatable; names and defaults "
                   "in docs/metrics.md).")
@input_options
def report(paths, fmt, output, force, top, thresholds, comm_patterns, step_nvtx) -> None:
    """Report overlap per rank and step, with diagnoses, for trace files, directories or globs.

    Example:

        tracelens report runs/ddp_bs32/ --format markdown -o summary.md
    """
    from .analyzers import Thresholds, analyze
    from .renderers import render

    limits = Thresholds().with_overrides(thresholds)   # checked before the (slow) parse
    traces = _progress_loader(paths, comm_patterns, step_nvtx)
    rep = analyze(traces, limits)
    to_terminal = output in (None, "-") and sys.stdout.isatty()
    width = click.get_terminal_size()[0] if to_terminal else 160
    _write(render(rep, fmt, color=to_terminal, width=max(width, 100), top=top), output, force)


@cli.command()
@click.argument("paths", nargs=-1, required=True)
@click.option("-o", "--output", "out_dir", required=True, metavar="DIR", help="Folder for the Parquet files.")
@input_options
def export(paths, out_dir, comm_patterns, step_nvtx) -> None:
    """Write the parsed trace tables as Parquet (one file per table, rank as a column).

    Example:

        tracelens export runs/ddp_bs32/ -o tables/
    """
    from .export import export_parquet

    for path in export_parquet(_progress_loader(paths, comm_patterns, step_nvtx), out_dir):
        click.echo(str(path))


def main(argv: list[str] | None = None) -> int:
    """Entry point: user mistakes become one line on stderr and a documented exit code."""
    try:
        cli.main(args=argv, prog_name="tracelens", standalone_mode=False)
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
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


def run() -> None:
    """Console-script wrapper: exit with main()'s code."""
    sys.exit(main())
