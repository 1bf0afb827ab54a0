"""Renderers turn a Report into text, Markdown, JSON or one self-contained HTML file. They format; they never
compute a metric."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:  # pragma: no cover
    from ..contract import Report

FORMATS = ("text", "json", "markdown", "html")


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
