"""Markdown for pull requests and CI summaries."""

from __future__ import annotations

from ..contract import Report
from .common import (EXPOSED_HEADERS, EXPOSED_LEFT, MIXED, STEP_HEADERS, STEP_LEFT, exposed_groups, frac, kernel_name,
                     ms, pattern_label, pct, pre_capture_line, rank_title, recurring, size, step_cells, step_label,
                     tax_line, total_cells, sources_line)
from .run_tables import (ACROSS_HEADERS, ACROSS_LEFT, BANDWIDTH_HEADERS, BANDWIDTH_LEFT, DIMENSION_HEADERS,
                         DIMENSION_LEFT, DISTRIBUTION_HEADERS, DISTRIBUTION_LEFT, VERDICT_HEADERS, VERDICT_LEFT,
                         across_cells, across_rows, bandwidth_cells, dimension_cells, dimension_rows, has_across,
                         distribution_rows, evidence_where, matching_line, merged_warnings, quoted_files,
                         settings_line, shown_ranks, shown_steps, steps_caption, transport_facts, transport_rows,
                         verdict_cells, verdict_levers)

_ICON = {"info": "ℹ️", "warning": "⚠️", "critical": "🛑"}


def table(headers, rows, left=None) -> list[str]:
    """A Markdown table; ``left``: the headers of its columns of words, aligned left as the text report aligns
    them (the numbers right); without it, the first column alone."""
    left = headers[:1] if left is None else left
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" if h in left else "---:" for h in headers) + "|"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return lines


def render(report: Report, top: int = 10, rank: int | None = None, every: bool = False,
           every_step: bool = False) -> str:
    """``rank``: that rank's tables and findings alone; ``every``: every rank's step table, however many;
    ``every_step``: every step's row, however many."""
    s = report.summary
    out = ["# tracelens overlap report", ""]
    if report.verdict is not None:
        out += [f"**{_md(report.verdict.headline)}**", ""]
        if report.verdict.causes:
            out += table(VERDICT_HEADERS, [verdict_cells(report, c) for c in report.verdict.causes], VERDICT_LEFT)
            out.append("")
        out += [f"- *Try ({cause}):* {_md(lever)}" for cause, lever in verdict_levers(report)]
        out.append("")
    if report.ranks:
        out += [f"**{s.ranks} rank(s), {s.steps} step(s)** — overlap {pct(s.overlap_pct)} of communication hidden; "
                f"exposed communication {frac(s.exposed_comm_fraction)} of step time"
                + (f"; most exposed rank {s.worst_rank}" if s.worst_rank is not None else "")
                + (f"; pattern {_pattern(s.pattern, s.pattern_counts, 'ranks')}" if s.pattern else "") + ".", ""]
        if sources_line(report) is not None:
            out += [f"*Sources:* {_md(sources_line(report))}.", ""]
    else:
        out += [f"**No traces**: {len(report.inspector.ranks)} rank(s) across ranks from NCCL Inspector logs alone; "
                "overlap with compute unknown." if report.inspector is not None else
                "**No traces**: the network transport from NCCL logs alone.", ""]
    found = recurring(report, rank)
    transport_shown = False
    if found:
        out += ["## Diagnoses", ""]
        for f in found:
            out.append(f"- {_ICON.get(f.severity, '')} **{f.severity}** · {f.who} · {f.where} · "
                       f"**{_md(f.title)}**  ")
            detail = [f.detail]
            if f.id == "nccl-transport" and report.transport is not None:
                # The transport's details go with its finding: one place for the verdict and its log lines.
                t = report.transport
                detail += transport_rows(t, with_facts=True) + ([quoted_files(t)] if quoted_files(t) else [])
                transport_shown = True
            out.append("  " + "  \n  ".join(map(_md, detail)) + (f"  \n  *Try:* {_md(f.advice)}" if f.advice else ""))
        out.append("")
    if report.transport is not None and not transport_shown:
        out += _transport(report.transport)
    shown, few_of_many = shown_ranks(report, rank, every)
    if few_of_many:
        out += [f"## Steps over {len(report.ranks)} ranks", "", "Each rank's mean per step.", ""]
        out += table(DISTRIBUTION_HEADERS, distribution_rows(report), DISTRIBUTION_LEFT)
        out += ["", f"The {len(shown)} most exposed ranks follow (`--ranks all`: every rank; `--rank N`: one).", ""]
    for r in shown:
        out += [f"## {rank_title(r)}", ""]
        steps, summary = shown_steps(r, every_step)
        out += table(STEP_HEADERS, (summary or []) + [step_cells(st) for st in steps] + [total_cells(r.totals)],
                     STEP_LEFT)
        out.append("")
        if summary:
            caption = steps_caption(r, steps, "`--steps all`")
            out += [caption[0].upper() + caption[1:] + ".", ""]
        if r.pattern == MIXED:
            out += [f"Pattern {_pattern(r.pattern, r.pattern_counts, 'steps')}.", ""]
        for line in (pre_capture_line(r), tax_line(r)):
            if line:
                out += [line[0].upper() + line[1:] + ".", ""]
        if line := settings_line(r):
            out += [_md(line[0].upper() + line[1:]) + ".", ""]
    groups = exposed_groups(report, top)
    if groups:
        out += ["## Most exposed collectives", ""]
        out += table(EXPOSED_HEADERS,
                     [(g.rank, g.op or "?", size(g.bytes), f"{g.count} of {g.calls}", ms(g.exposed_ns),
                       ms(g.worst_ns), step_label(g.worst_step), "`" + kernel_name(g.name) + "`") for g in groups],
                     EXPOSED_LEFT)
        out.append("")
    dims = dimension_rows(report)
    if dims:
        out += ["## Exposed communication by parallelism", ""]
        out += table(DIMENSION_HEADERS, [dimension_cells(d) for d in dims], DIMENSION_LEFT)
        out.append("")
    if has_across(report):
        rows, spread = across_rows(report)
        out += ["## Across ranks", ""]
        out += table(ACROSS_HEADERS, [["…"] + [""] * (len(ACROSS_HEADERS) - 1) if r is None else across_cells(r)
                                       for r in rows], ACROSS_LEFT)
        out += [""] + [line[0].upper() + line[1:] + "." for line in (spread, matching_line(report)) if line] + [""]
        if report.cross_rank.bandwidth:
            out += ["### Bus bandwidth (GB/s, over the transfer time)", ""]
            out += table(BANDWIDTH_HEADERS, [bandwidth_cells(b) for b in report.cross_rank.bandwidth], BANDWIDTH_LEFT)
            out.append("")
    if report.warnings:
        out += ["## Warnings", ""]
        out += table(("rank", "code", "count", "message"),
                     [(who.removeprefix("ranks ").removeprefix("rank "), f"`{code}`", count, message)
                      for who, code, count, message in merged_warnings(report)], ("rank", "code", "message"))
        out.append("")
    return "\n".join(out)


def _transport(t) -> list[str]:
    out = ["## Network transport", "", f"**{t.verdict}** ({_md(transport_facts(t))})", ""]
    out += [f"- {_md(row)}" for row in transport_rows(t, with_facts=False)]
    if t.evidence:
        out += ["", "Evidence:", ""]
        out += [f"- `{evidence_where(e)}`: `{e.text.replace('`', chr(39))}`" for e in t.evidence]
    return out + [""]


def _pattern(pattern: str, counts: dict[str, int], of: str) -> str:
    """``**sawtooth**``, ``**mixed** (steps: two-phase 2, sawtooth 1)``."""
    label = pattern_label(pattern, counts, of)
    return f"**{pattern}**" + label[len(pattern):]


def _md(text: str) -> str:
    """Escape what Markdown would read as emphasis or HTML in names such as ``op<float>*``."""
    for ch in ("\\", "*", "_", "<", ">", "`", "|"):
        text = text.replace(ch, "\\" + ch)
    return text
