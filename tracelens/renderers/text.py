"""Terminal tables (rich). Colour and width are arguments: only the CLI looks at the terminal."""

from __future__ import annotations

import io

from rich.console import Console
from rich.table import Table

from ..report import Report
from .common import (STEP_HEADERS, findings, frac, most_exposed, ms, pct, rank_title, short, size, step_cells,
                     step_label, steps_label, total_cells)

_STYLE = {"info": "cyan", "warning": "yellow", "critical": "bold red"}


def render(report: Report, color: bool = False, width: int = 120, top: int = 10) -> str:
    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system="standard" if color else None, force_terminal=color,
                  highlight=False)
    for r in report.ranks:
        table = Table(title=rank_title(r), title_justify="left")
        for i, h in enumerate(STEP_HEADERS):
            table.add_column(h, justify="left" if h in ("step", "pattern") else "right")
        for st in r.steps:
            table.add_row(*step_cells(st))
        table.add_row(*total_cells(r.totals), style="bold")
        con.print(table)
    exposed = most_exposed(report, top)
    if exposed:
        table = Table(title="most exposed collectives", title_justify="left")
        for h in ("rank", "step", "op", "size", "duration ms", "exposed ms", "kernel"):
            table.add_column(h, justify="right" if h.endswith("ms") or h == "size" else "left")
        for c in exposed:
            table.add_row(str(c.rank), step_label(c.step), c.op or "?", size(c.bytes), ms(c.duration_ns),
                          ms(c.exposed_ns), short(c.name, 50))
        con.print(table)
    found = findings(report)
    if found:
        con.print("[bold]diagnoses[/bold]")
    for f in found:
        style = _STYLE.get(f.severity, "")
        con.print(f"[{style}]{f.severity.upper()}[/{style}] rank {f.rank} · {steps_label(f.steps)} · {f.title}",
                  markup=True, highlight=False)
        con.print(f"    {f.detail}", markup=False)
        if f.advice:
            con.print(f"    try: {f.advice}", markup=False)
    s = report.summary
    con.print(f"[bold]summary[/bold]: {s.ranks} rank(s), {s.steps} step(s); overlap {pct(s.overlap_pct)} of "
              f"communication hidden; exposed communication {frac(s.exposed_comm_fraction)} of step time"
              + (f"; worst rank {s.worst_rank}" if s.worst_rank is not None else "")
              + (f"; pattern {s.pattern}" if s.pattern else ""))
    for w in report.warnings:
        where = f"rank {w.rank}: " if w.rank is not None else ""
        con.print(f"[yellow]warning[/yellow] {where}{w.code} ×{w.count}: {w.message}")
    return buf.getvalue()
