"""Renderers turn a Report into text, Markdown, JSON or one self-contained HTML file. They format; they never
compute a metric."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..contract import Report

FORMATS = ("text", "json", "markdown", "html")
# The formats whose renderings the warm cache keeps beside the Report: their tables cost more than all the
# rest of a warm report (rich alone: its import and layout, ~80 ms). JSON is the Report as it is stored; HTML
# is megabytes of figures.
KEPT = ("text", "markdown")
# What rich reads from the environment (rich/console.py): a text rendering depends on them too.
_RICH_ENV = ("COLORTERM", "COLUMNS", "DATABRICKS_RUNTIME_VERSION", "FORCE_COLOR", "JUPYTER_COLUMNS",
             "JUPYTER_LINES", "LINES", "NO_COLOR", "TERM", "TTY_COMPATIBLE", "TTY_INTERACTIVE")


def render(report: Report, fmt: str, *, color: bool = False, width: int = 120, top: int = 10,
           rank: int | None = None, every: bool = False, every_step: bool = False) -> str:
    """``rank``: the text and Markdown show that rank's tables and findings alone; ``every``: every rank's step
    table, however many ranks (past 16 they show the distribution over ranks and the most exposed ranks');
    ``every_step``: every step's row, however many steps (past 50 a rank's table shows the distribution over
    its steps and the 5 steps with the most exposed communication)."""
    if fmt == "json":
        return report.to_json().decode() + "\n"
    # Each format's module only when asked for: JSON needs neither, and text needs rich.
    if fmt == "markdown":
        from . import markdown  # lazy: only the Markdown format needs it

        return markdown.render(report, top=top, rank=rank, every=every, every_step=every_step)
    if fmt == "html":
        from . import html  # lazy: plotly, the optional ``dashboard`` extra

        return html.render(report, top=top)
    if fmt == "text":
        from . import text  # lazy: rich, which JSON and Markdown never load

        return text.render(report, color=color, width=width, top=top, rank=rank, every=every, every_step=every_step)
    raise ValueError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def view_key(fmt: str, **args) -> tuple | None:
    """Everything a rendering depends on besides the Report and tracelens' own code (which the Report's key
    holds): the format and :func:`render`'s arguments, and for text the installed rich (its files' sizes
    and times) and the environment variables it reads. None for a format the cache does not keep."""
    if fmt not in KEPT:
        return None
    if fmt != "text":
        return (fmt, tuple(sorted(args.items())))
    # lazy: where rich is installed, found without importing it (a warm text report never does)
    from importlib.util import find_spec

    spec = find_spec("rich")
    if spec is None or not spec.submodule_search_locations:
        return None
    stamp = []
    for folder in spec.submodule_search_locations:
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            return None
        stamp += [(e.name, e.stat().st_size, e.stat().st_mtime_ns) for e in entries if e.name.endswith(".py")]
    return (fmt, tuple(sorted(args.items())), tuple(stamp), tuple(os.environ.get(v) for v in _RICH_ENV))
