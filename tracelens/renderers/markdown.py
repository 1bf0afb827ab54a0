"""Markdown for pull requests and CI summaries."""

from __future__ import annotations

from ..contract import Report
from .common import (ACROSS_HEADERS, BANDWIDTH_HEADERS, MIXED, STEP_HEADERS, across_cells, across_rows,
                     bandwidth_cells, exposed_groups, matching_line, findings, frac, ms, pattern_label, pct,
                     pre_capture_line, rank_title, short, size, step_cells, step_label, total_cells)

_ICON = {"info": "ℹ️", "warning": "⚠️", "critical": "🛑"}


def _table(headers, rows) -> list[str]:
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(headers))) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def render(report: Report, top: int = 10) -> str:
    s = report.summary
    out = ["# tracelens overlap report", "",
           f"**{s.ranks} rank(s), {s.steps} step(s)** — overlap {pct(s.overlap_pct)} of communication hidden; "
           f"exposed communication {frac(s.exposed_comm_fraction)} of step time"
           + (f"; worst rank {s.worst_rank}" if s.worst_rank is not None else "")
           + (f"; pattern {_pattern(s.pattern, s.pattern_counts, 'ranks')}" if s.pattern else "") + ".", ""]
    found = findings(report)
    if found:
        out += ["## Diagnoses", ""]
        for f in found:
            out.append(f"- {_ICON.get(f.severity, '')} **{f.severity}** · rank {f.rank} · {f.where} · "
                       f"**{_md(f.title)}**  ")
            out.append(f"  {_md(f.detail)}" + (f"  \n  *Try:* {_md(f.advice)}" if f.advice else ""))
        out.append("")
    for r in report.ranks:
        out += [f"## {rank_title(r)}", ""]
        out += _table(STEP_HEADERS, [step_cells(st) for st in r.steps] + [total_cells(r.totals)])
        out.append("")
        if r.pattern == MIXED:
            out += [f"Pattern {_pattern(r.pattern, r.pattern_counts, 'steps')}.", ""]
        if line := pre_capture_line(r):
            out += [line[0].upper() + line[1:] + ".", ""]
    groups = exposed_groups(report, top)
    if groups:
        out += ["## Most exposed collectives", ""]
        out += _table(("rank", "op", "size", "count", "exposed ms", "worst ms", "worst step", "kernel"),
                      [(g.rank, g.op or "?", size(g.bytes), f"{g.count} of {g.calls}", ms(g.exposed_ns),
                        ms(g.worst_ns), step_label(g.worst_step), "`" + short(g.name) + "`") for g in groups])
        out.append("")
    if report.cross_rank is not None:
        rows, spread = across_rows(report)
        out += ["## Across ranks", ""]
        out += _table(ACROSS_HEADERS, [["…"] + [""] * (len(ACROSS_HEADERS) - 1) if r is None else across_cells(r)
                                       for r in rows])
        out += [""] + [line[0].upper() + line[1:] + "." for line in (spread, matching_line(report)) if line] + [""]
        if report.cross_rank.bandwidth:
            out += ["### Bus bandwidth (GB/s, over the transfer time)", ""]
            out += _table(BANDWIDTH_HEADERS, [bandwidth_cells(b) for b in report.cross_rank.bandwidth])
            out.append("")
    if report.warnings:
        out += ["## Warnings", ""]
        out += _table(("rank", "code", "count", "message"),
                      [(w.rank if w.rank is not None else "", f"`{w.code}`", w.count, w.message)
                       for w in report.warnings])
        out.append("")
    return "\n".join(out)


def _pattern(pattern: str, counts: dict[str, int], of: str) -> str:
    """``**sawtooth**``, ``**mixed** (steps: two-phase 2, sawtooth 1)``."""
    label = pattern_label(pattern, counts, of)
    return f"**{pattern}**" + label[len(pattern):]


def _md(text: str) -> str:
    """Escape what Markdown would read as emphasis or HTML in names such as ``op<float>*``."""
    for ch in ("\\", "*", "_", "<", ">", "`", "|"):
        text = text.replace(ch, "\\" + ch)
    return text
