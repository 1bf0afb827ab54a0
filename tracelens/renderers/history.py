"""History database rows as terminal tables or JSON (formatting only)."""

from __future__ import annotations

import io

import msgspec
import pandas as pd
from rich.console import Console
from rich.table import Table

from .common import frac, ms, pct

_RUN_HEADERS = ("id", "label", "commit", "added (UTC)", "ranks", "steps", "overlap %", "exposed frac", "pattern",
                "critical")


def _console(buf: io.StringIO) -> Console:
    return Console(file=buf, width=160, color_system=None, highlight=False)


def _run_cells(r: dict) -> list[str]:
    return [str(r["id"]), r["label"] or "", (r["commit"] or "")[:12], r["created_at"] or "", str(r["ranks"]),
            str(r["steps"]), pct(r["overlap_pct"]), frac(r["exposed_comm_fraction"]), r["pattern"] or "",
            str(r["critical"])]


def runs_text(runs: list[dict]) -> str:
    if not runs:
        return "no runs\n"
    buf = io.StringIO()
    table = Table()
    for h in _RUN_HEADERS:
        table.add_column(h, justify="right" if h in ("id", "ranks", "steps", "critical") or "%" in h
                         or "frac" in h else "left")
    for r in runs:
        table.add_row(*_run_cells(r))
    _console(buf).print(table)
    return buf.getvalue()


def runs_json(runs: list[dict]) -> str:
    return msgspec.json.format(msgspec.json.encode(runs), indent=2).decode() + "\n"


def run_text(run: dict, steps: pd.DataFrame) -> str:
    buf = io.StringIO()
    con = _console(buf)
    con.print(runs_text([run]), end="")
    con.print(f"source: {run['source']} · tracelens {run['tool_version']}")
    table = Table()
    for h in ("rank", "step", "duration ms", "comm ms", "exposed comm ms", "overlap %", "exposed frac", "pattern"):
        table.add_column(h, justify="left" if h in ("pattern",) else "right")
    for row in steps.itertuples(index=False):
        step = "all" if pd.isna(row.step) else str(int(row.step))
        table.add_row(str(row.rank), step + ("" if row.complete else " (cut)"), ms(row.duration_ns),
                      ms(row.comm_ns), ms(row.exposed_comm_ns), pct(_clean(row.overlap_pct)),
                      frac(_clean(row.exposed_comm_fraction)), row.pattern or "")
    con.print(table)
    return buf.getvalue()


def run_json(run: dict, steps: pd.DataFrame) -> str:
    rows = [{k: _clean(v) for k, v in rec.items()} for rec in steps.to_dict("records")]
    return msgspec.json.format(msgspec.json.encode({**run, "rank_steps": rows}), indent=2).decode() + "\n"


def _clean(v):
    """None for SQL NULLs that pandas turned into NaN (JSON never holds NaN)."""
    return None if v is None or (not isinstance(v, str) and bool(pd.isna(v))) else v
