"""Terminal tables (rich). Colour and width are arguments: only the CLI looks at the terminal.

Every table takes the roomiest layout that fits the width (``layouts``): boxed, first with one-line
headers, then with headers over two lines (from 120 columns on); then without a box, with two spaces
between columns, then one; then tight (the step table leaves out its pattern column, whose values follow
the table on a line of their own; the history list shortens dates and labels); last with fewer decimals.
Numbers are never wrapped or cut: only names (kernels, labels) are shortened with an ellipsis and prose
wraps at the width.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable, Iterator

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ..contract import Report
from .common import (EXPOSED_HEADERS, EXPOSED_LEFT, MIXED, STEP_HEADERS, STEP_LEFT, exposed_groups, frac, kernel_name,
                     ms, pattern_label, pct, pre_capture_line, rank_title, recurring, size, step_cells, step_label,
                     steps_label, tax_line, total_cells, two_lines, sources_line)
from .run_tables import (ACROSS_HEADERS, ACROSS_LEFT, BANDWIDTH_HEADERS, BANDWIDTH_LEFT, DIMENSION_HEADERS,
                         DIMENSION_LEFT, DISTRIBUTION_HEADERS, DISTRIBUTION_LEFT, VERDICT_HEADERS, VERDICT_LEFT,
                         across_cells, across_rows, bandwidth_cells, dimension_cells, dimension_rows, has_across,
                         distribution_rows, matching_line, merged_warnings, quoted_files, settings_line, shown_ranks,
                         shown_steps, step_distribution_rows, steps_caption, transport_facts, transport_rows,
                         verdict_cells, verdict_levers)

_STYLE = {"info": "cyan", "warning": "yellow", "critical": "bold red"}
ROOMY_WIDTH = 120          # from this width on, tables may keep their box
MIN_KERNEL_WIDTH = 16      # narrower than this, a kernel name says too little: try a tighter layout


@dataclass(frozen=True)
class Layout:
    boxed: bool = True
    one_line_headers: bool = True
    gap: int = 2                 # spaces between columns without a box
    tight: bool = False          # leave out or shorten what a table can spare
    decimals: int = 3            # of the millisecond columns


def layouts(width: int) -> Iterator[Layout]:
    """The candidate layouts, roomiest first."""
    if width >= ROOMY_WIDTH:
        yield Layout()
        yield Layout(one_line_headers=False)
    for tight in (False, True):
        for gap in (2, 1):
            yield Layout(boxed=False, one_line_headers=False, gap=gap, tight=tight)
    for decimals in (2, 1, 0):
        yield Layout(boxed=False, one_line_headers=False, gap=1, tight=True, decimals=decimals)


def new_table(layout: Layout) -> Table:
    if layout.boxed:
        return Table()
    # SIMPLE_HEAD draws one rule under the header; its column divider is itself one space wide.
    return Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, layout.gap - 1, 0, 0))


def header(text: str, layout: Layout) -> str:
    return text if layout.one_line_headers else two_lines(text)


def natural_width(con: Console, table: Table) -> int:
    """The width a table takes when nothing has to wrap."""
    return Measurement.get(con, con.options.update_width(100_000), table).maximum


def fit(con: Console, width: int, build: Callable[[Layout], list[Table]]) -> tuple[Layout, list[Table]]:
    """The first layout whose tables all fit ``width`` (the tightest one when none does)."""
    for layout in layouts(width):
        tables = build(layout)
        if all(natural_width(con, t) <= width for t in tables):
            return layout, tables
    return layout, tables


def render(report: Report, color: bool = False, width: int = 120, top: int = 10, rank: int | None = None,
           every: bool = False, every_step: bool = False) -> str:
    """``rank``: that rank's tables and findings alone; ``every``: every rank's step table, however many;
    ``every_step``: every step's row, however many."""
    buf = io.StringIO()
    con = Console(file=buf, width=width, color_system="standard" if color else None, force_terminal=color,
                  no_color=False if color else None, highlight=False, emoji=False)
    _verdict(con, width, report)
    shown, few_of_many = shown_ranks(report, rank, every)
    if few_of_many:
        _, (table,) = fit(con, width, lambda lay: [_distribution_table(report, lay)])
        con.print(Text(f"steps over {len(report.ranks)} ranks (each rank's mean per step)", style="bold"))
        con.print(table)
        con.print(Text(f"the {len(shown)} most exposed ranks (--ranks all: every rank; --rank N: one)"))
    rows = [shown_steps(r, every_step) for r in shown]
    layout, tables = fit(con, width, lambda lay: [_step_table(r, lay, *rs) for r, rs in zip(shown, rows)])
    for r, table, (steps, summary) in zip(shown, tables, rows):
        con.print(Text(rank_title(r), style="bold"))
        con.print(table)
        caption = steps_caption(r, steps, "--steps all") if summary else ""
        for line in (caption, _pattern_line(r, layout.tight and not summary), pre_capture_line(r), tax_line(r),
                     settings_line(r)):
            if line:
                con.print(line, markup=False)
    groups = exposed_groups(report, top)
    if groups:
        _, (table,) = fit(con, width, lambda lay: [_exposed_table(con, width, groups, lay)])
        con.print(Text("most exposed collectives", style="bold"))
        con.print(table)
    dims = dimension_rows(report)
    if dims:
        _, (table,) = fit(con, width, lambda lay: [_dimension_table(dims, lay)])
        con.print(Text("exposed communication by parallelism", style="bold"))
        con.print(table)
    if has_across(report):
        _across(con, width, report)
    found = recurring(report, rank)
    if found:
        con.print("[bold]diagnoses[/bold]")
    transport_shown = False
    for f in found:
        style = _STYLE.get(f.severity, "")
        con.print(Text.assemble((f.severity.upper(), style), f" {f.who} · {f.where} · {f.title}"))
        con.print(Padding(Text(f.detail), (0, 0, 0, 4)))
        if f.id == "nccl-transport" and report.transport is not None:
            # The transport's details go with its finding: one place for the verdict and its log lines.
            t = report.transport
            for row in transport_rows(t, with_facts=True) + ([quoted_files(t)] if quoted_files(t) else []):
                con.print(Padding(Text(row), (0, 0, 0, 4)))
            transport_shown = True
        if f.advice:
            con.print(Padding(Text(f"try: {f.advice}"), (0, 0, 0, 4)))
    if report.transport is not None and not transport_shown:
        _transport(con, report.transport)
    s = report.summary
    if not report.ranks and report.inspector is not None:
        con.print(Text.assemble(("summary", "bold"), f": no traces; {len(report.inspector.ranks)} rank(s) across "
                                                     "ranks from NCCL Inspector logs alone; overlap with compute "
                                                     "unknown"))
    elif not report.ranks:
        con.print(Text.assemble(("summary", "bold"), ": no traces; the network transport from NCCL logs alone"))
    else:
        con.print(Text.assemble(("summary", "bold"),
                                f": {s.ranks} rank(s), {s.steps} step(s); overlap {pct(s.overlap_pct)} of "
                                f"communication hidden; exposed communication {frac(s.exposed_comm_fraction)} of "
                                f"step time" + (f"; most exposed rank {s.worst_rank}" if s.worst_rank is not None
                                                else "")
                                + (f"; pattern {pattern_label(s.pattern, s.pattern_counts, 'ranks')}" if s.pattern
                                   else "")))
        if sources_line(report) is not None:
            con.print(Text.assemble(("sources", "bold"), f": {sources_line(report)}"))
    for who, code, count, message in merged_warnings(report):
        con.print(Text.assemble(("warning", "yellow"), f" {who + ': ' if who else ''}{code} ×{count}: {message}"))
    # Padding and titles fill their lines with spaces; a terminal does not need them.
    return "".join(line.rstrip(" ") + "\n" for line in buf.getvalue().splitlines())


def _verdict(con: Console, width: int, report: Report) -> None:
    """The run's answer first: the headline, the causes with their cost, and what to try for each."""
    v = report.verdict
    if v is None:
        return
    con.print(Text.assemble(("verdict", "bold"), ": ", (v.headline, "bold")))
    if v.causes:
        def build(layout: Layout) -> Table:
            table = new_table(layout)
            for h in VERDICT_HEADERS:
                table.add_column(header(h, layout), justify="left" if h in VERDICT_LEFT else "right",
                                 no_wrap=h != "why")
            for c in v.causes:
                table.add_row(*verdict_cells(report, c))
            return table

        _, (table,) = fit(con, width, lambda lay: [build(lay)])
        con.print(table)
    for cause, lever in verdict_levers(report):
        con.print(Padding(Text(f"try ({cause}): {lever}"), (0, 0, 0, 2)))


def _distribution_table(report: Report, layout: Layout) -> Table:
    table = new_table(layout)
    for h in DISTRIBUTION_HEADERS:
        table.add_column(header(h, layout), justify="left" if h in DISTRIBUTION_LEFT else "right", no_wrap=True)
    for row in distribution_rows(report, layout.decimals):
        table.add_row(*row)
    return table


def _across(con: Console, width: int, report: Report) -> None:
    """The rank table (wait, transfer, late count, clock offset) and the bandwidth table."""
    rows, spread = across_rows(report)

    def ranks(layout: Layout) -> Table:
        table = new_table(layout)
        for h in ACROSS_HEADERS:
            table.add_column(header(h, layout), justify="left" if h in ACROSS_LEFT else "right", no_wrap=True)
        for r in rows:
            table.add_row(*(["…"] + [""] * (len(ACROSS_HEADERS) - 1) if r is None else
                            across_cells(r, layout.decimals)))
        return table

    _, (table,) = fit(con, width, lambda lay: [ranks(lay)])
    con.print(Text("across ranks", style="bold"))
    con.print(table)
    for line in (spread, matching_line(report)):
        if line:
            con.print(Text(line))
    bw = report.cross_rank.bandwidth
    if bw:
        def build(layout: Layout) -> Table:
            table = new_table(layout)
            for h in BANDWIDTH_HEADERS:
                table.add_column(header(h, layout), justify="left" if h in BANDWIDTH_LEFT else "right",
                                 no_wrap=True)
            for b in bw:
                table.add_row(*bandwidth_cells(b))
            return table

        _, (table,) = fit(con, width, lambda lay: [build(lay)])
        con.print(Text("bus bandwidth (GB/s, over the transfer time)", style="bold"))
        con.print(table)


def _transport(con: Console, t) -> None:
    """The network transport without a finding of its own (or with it filtered out): its verdict,
    communicators, NCCL settings, bandwidth and evidence lines."""
    style = _STYLE.get(t.severity, "")
    con.print(Text.assemble(("network transport", "bold"), ": ", (t.verdict, style), f" ({transport_facts(t)})"))
    for row in transport_rows(t, with_facts=False):
        con.print(Padding(Text(row), (0, 0, 0, 4)))
    # Each file once, then its lines: a long path wrapped in front of every line cut the path mid-name at
    # 80 columns, and repeated it.
    for file in dict.fromkeys(e.file for e in t.evidence):
        con.print(Padding(Text(file), (0, 0, 0, 4)))
        lines = Table.grid(padding=(0, 2))
        lines.add_column(justify="right", no_wrap=True)
        lines.add_column()
        for e in t.evidence:
            if e.file == file:
                lines.add_row("-" if e.line is None else str(e.line), e.text)
        con.print(Padding(lines, (0, 0, 0, 6)))


def _step_table(r, layout: Layout, steps: list, summary: list | None) -> Table:
    table = new_table(layout)
    headers = STEP_HEADERS[:-1] if layout.tight else STEP_HEADERS
    for h in headers:
        table.add_column(header(h, layout), justify="left" if h in STEP_LEFT else "right", no_wrap=True)
    n = len(headers)
    for i, row in enumerate(step_distribution_rows(r.steps, layout.decimals) if summary else ()):
        table.add_row(*row[:n], style="italic", end_section=i == len(summary) - 1)
    for st in steps:
        table.add_row(*step_cells(st, layout.decimals)[:n])
    table.add_row(*total_cells(r.totals, layout.decimals)[:n], style="bold")
    return table


def _pattern_line(r, tight: bool) -> str:
    """The line under a rank's step table: a mixed rank's counts, ``pattern: mixed (steps: two-phase 2,
    sawtooth 1)``; in a tight layout, which also lacks the pattern column, the steps of each pattern:
    ``pattern: sawtooth in steps 2–4; two-phase in step 5`` (after the counts of a mixed rank). A summarised
    table (past 50 steps) gets the counts only, however tight: its steps' ranges could fill a screen."""
    mixed = pattern_label(r.pattern, r.pattern_counts, "steps") if r.pattern == MIXED else ""
    by_pattern: dict[str, list] = {}
    for st in r.steps if tight else ():
        if st.pattern:
            by_pattern.setdefault(st.pattern, []).append(st.step)
    where = "; ".join(f"{p} in {steps_label(s, len(r.steps))}" for p, s in by_pattern.items())
    parts = [part for part in (mixed, where) if part]
    return ("pattern: " + " — ".join(parts)) if parts else ""


def _dimension_table(rows, layout: Layout) -> Table:
    table = new_table(layout)
    for h in DIMENSION_HEADERS:
        table.add_column(header(h, layout), justify="left" if h in DIMENSION_LEFT else "right",
                         no_wrap=h != "rules")
    for d in rows:
        table.add_row(*dimension_cells(d, layout.decimals))
    return table


def _exposed_table(con: Console, width: int, groups, layout: Layout) -> Table:
    def build(kernel_width: int | None) -> Table:
        table = new_table(layout)
        for h in EXPOSED_HEADERS:
            table.add_column(header(h, layout), justify="left" if h in EXPOSED_LEFT else "right",
                             no_wrap=True)
        for g in groups:
            table.add_row(str(g.rank), g.op or "?", size(g.bytes), f"{g.count} of {g.calls}",
                          ms(g.exposed_ns, layout.decimals), ms(g.worst_ns, layout.decimals),
                          step_label(g.worst_step),
                          Text("" if kernel_width is None else kernel_name(g.name, kernel_width)))
        return table

    # What the other columns leave of the width goes to the kernel names (at most 60 characters of them);
    # below MIN_KERNEL_WIDTH the table no longer fits and fit() tries a tighter layout.
    room = width - natural_width(con, build(None)) + len("kernel")
    return build(max(min(room, 60), MIN_KERNEL_WIDTH))
