"""Markdown for pull requests and CI summaries."""

from __future__ import annotations

from ..report import Report
from .common import (STEP_HEADERS, frac, most_exposed, ms, pct, rank_title, short, size, step_cells,
                     step_label, total_cells)


def _table(headers, rows) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def render(report: Report, top: int = 10) -> str:
    s = report.summary
    out = ["# tracelens overlap report", "",
           f"**{s.ranks} rank(s), {s.steps} step(s)** — overlap {pct(s.overlap_pct)} of communication hidden; "
           f"exposed communication {frac(s.exposed_comm_fraction)} of step time"
           + (f"; worst rank {s.worst_rank}" if s.worst_rank is not None else "") + ".", ""]
    for r in report.ranks:
        out += [f"## {rank_title(r)}", ""]
        out += _table(STEP_HEADERS, [step_cells(st) for st in r.steps] + [total_cells(r.totals)])
        out.append("")
    exposed = most_exposed(report, top)
    if exposed:
        out += ["## Most exposed collectives", ""]
        out += _table(("rank", "step", "op", "size", "duration ms", "exposed ms", "kernel"),
                      [(c.rank, step_label(c.step), c.op or "?", size(c.bytes), ms(c.duration_ns), ms(c.exposed_ns),
                        "`" + short(c.name) + "`") for c in exposed])
        out.append("")
    if report.warnings:
        out += ["## Warnings", ""]
        out += _table(("rank", "code", "count", "message"),
                      [(w.rank if w.rank is not None else "", f"`{w.code}`", w.count, w.message)
                       for w in report.warnings])
        out.append("")
    return "\n".join(out)
