"""History database rows as terminal tables or JSON (formatting only)."""

from __future__ import annotations

import io

import msgspec
import pandas as pd
from rich.console import Console
from rich.table import Table
from rich.text import Text

from .common import frac, ms, pct
from .text import Layout, fit, header, new_table

_RUN_HEADERS = ("id", "label", "commit", "added (UTC)", "ranks", "steps", "overlap %", "exposed frac", "pattern",
                "critical")
_STEP_HEADERS = ("rank", "step", "duration ms", "comm ms", "exposed comm ms", "overlap %", "exposed frac", "pattern")
_LEFT = ("label", "commit", "added (UTC)", "pattern")


def _console(buf: io.StringIO, width: int) -> Console:
    return Console(file=buf, width=width, color_system=None, highlight=False)


def _added(created_at: str | None, layout: Layout) -> str:
    """``2025-01-02T03:04:05+00:00``; ``2025-01-02 03:04`` without a box; the date alone when tight."""
    text = created_at or ""
    return text if layout.boxed else text[:10] if layout.tight else text[:16].replace("T", " ")


def _run_cells(r: dict, layout: Layout) -> list:
    # Text, not str: a label such as "exp[3]" is the user's, not rich markup.
    return [str(r["id"]), Text(r["label"] or ""), Text((r["commit"] or "")[:12 if layout.boxed else 8]),
            _added(r["created_at"], layout), str(r["ranks"]), str(r["steps"]), pct(r["overlap_pct"]),
            frac(r["exposed_comm_fraction"]), r["pattern"] or "", str(r["critical"])]


def _runs_table(runs: list[dict], layout: Layout) -> Table:
    table = new_table(layout)
    for h in _RUN_HEADERS:
        # Labels are the user's: a long one is cut with an ellipsis rather than widening the table.
        label_max = None if layout.boxed else 12 if layout.tight else 20
        table.add_column(header("crit" if h == "critical" and layout.tight else h, layout),
                         justify="left" if h in _LEFT else "right", no_wrap=True, overflow="ellipsis",
                         max_width=label_max if h == "label" else None)
    for r in runs:
        table.add_row(*_run_cells(r, layout))
    return table


def runs_text(runs: list[dict], width: int = 160) -> str:
    if not runs:
        return "no runs\n"
    buf = io.StringIO()
    con = _console(buf, width)
    _, (table,) = fit(con, width, lambda layout: [_runs_table(runs, layout)])
    con.print(table)
    return _trimmed(buf)


def runs_json(runs: list[dict]) -> str:
    return msgspec.json.format(msgspec.json.encode(runs), indent=2).decode() + "\n"


def _steps_table(steps: pd.DataFrame, layout: Layout) -> Table:
    table = new_table(layout)
    for h in _STEP_HEADERS:
        table.add_column(header(h, layout), justify="left" if h == "pattern" else "right", no_wrap=True)
    d = layout.decimals
    for row in steps.itertuples(index=False):
        step = "all" if pd.isna(row.step) else str(int(row.step))
        table.add_row(str(row.rank), step + ("" if row.complete else " (cut)"), ms(row.duration_ns, d),
                      ms(row.comm_ns, d), ms(row.exposed_comm_ns, d), pct(_clean(row.overlap_pct)),
                      frac(_clean(row.exposed_comm_fraction)), row.pattern or "")
    return table


def run_text(run: dict, steps: pd.DataFrame, width: int = 160) -> str:
    buf = io.StringIO()
    con = _console(buf, width)
    con.print(runs_text([run], width), end="", markup=False)
    con.print(f"source: {run['source']} · tracelens {run['tool_version']}", markup=False)
    _, (table,) = fit(con, width, lambda layout: [_steps_table(steps, layout)])
    con.print(table)
    return _trimmed(buf)


def _trimmed(buf: io.StringIO) -> str:
    return "".join(line.rstrip(" ") + "\n" for line in buf.getvalue().splitlines())


def run_json(run: dict, steps: pd.DataFrame) -> str:
    rows = [{k: _clean(v) for k, v in rec.items()} for rec in steps.to_dict("records")]
    return msgspec.json.format(msgspec.json.encode({**run, "rank_steps": rows}), indent=2).decode() + "\n"


def _clean(v):
    """None for SQL NULLs that pandas turned into NaN (JSON never holds NaN)."""
    return None if v is None or (not isinstance(v, str) and bool(pd.isna(v))) else v
