"""Write the trace model as Parquet, one file per table with ``rank`` as a column, for other tools; and beside
it the report's own numbers, so that a notebook joins the two and gets the report (docs/metrics.md, "Export").

Steps have two time ranges, named apart: ``host_start_ns``/``host_end_ns``, the ``ProfilerStep`` range on the
CPU, and ``window_start_ns``/``window_end_ns``, the step window on the device that every metric counts in.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from . import outputs
from .errors import printable

if TYPE_CHECKING:  # pragma: no cover
    from .contract import Report
    from .model import RankTrace

TABLES = ("device_ops", "host_ops", "collectives", "steps", "threads")
# What an export writes, and nothing else: a folder holding any of these is refused without --force, and
# --force overwrites these files alone.
FILES = tuple(f"{name}.parquet" for name in (*TABLES, "ranks", "step_metrics", "collective_metrics"))
# The metrics of a step that are not one number (the pattern's evidence, the split per dimension) stay in the
# JSON report.
_NESTED = ("pattern_evidence", "by_dimension")


def existing(out_dir: str | Path) -> list[str]:
    """The files an export into ``out_dir`` would overwrite: any name there, a dangling link included (it is
    replaced as a name, and what the user put there is theirs until --force says otherwise)."""
    out = Path(out_dir)
    return [name for name in FILES if os.path.lexists(out / name)] if out.is_dir() else []


def export_parquet(traces: list[RankTrace], out_dir: str | Path, report: Report | None = None) -> list[Path]:
    """Write ``<table>.parquet`` for every table plus ``ranks.parquet`` (run metadata) and, given the traces'
    ``report``, ``step_metrics.parquet`` and ``collective_metrics.parquet``; returns the paths."""
    import pandas as pd     # lazy: tracelens export imports this module before its decode workers start

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    frames = {}
    for table in TABLES:
        parts = [getattr(t, table).to_pandas().assign(rank=t.meta.rank) for t in traces]
        frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
        frames[table] = frame[["rank"] + [c for c in frame.columns if c != "rank"]]
    frames["steps"] = _steps(frames["steps"].rename(columns={"start_ns": "host_start_ns", "end_ns": "host_end_ns"}),
                             report)
    frames["ranks"] = pd.DataFrame([{
        "rank": t.meta.rank, "rank_rule": t.meta.rank_rule, "world_size": t.meta.world_size,
        "backend": t.meta.backend, "source": printable(t.meta.source, one_line=True), "format": t.meta.format,
        "base_ns": t.meta.base_ns, "device_names": list(t.meta.device_names),
    } for t in traces])
    if report is not None:
        frames["step_metrics"] = step_metrics(report)
        frames["collective_metrics"] = collective_metrics(report)
    written = []
    for name in FILES:
        if name[:-len(".parquet")] in frames:
            path = out / name
            with outputs.replacing(path) as fh:       # a link or file there is replaced, never written through
                frames[name[:-len(".parquet")]].to_parquet(fh, index=False)
            written.append(path)
    return written


def _steps(host, report: Report | None):
    """The host ranges with the window of each step that has one in the report (null where it has none)."""
    import pandas as pd     # lazy: as in export_parquet

    rows = [(r.rank, s.step, s.start_ns, s.end_ns) for r in (report.ranks if report else ()) for s in r.steps
            if s.step is not None]
    windows = pd.DataFrame(rows, columns=["rank", "step", "window_start_ns", "window_end_ns"])
    frame = host.astype({"rank": "int64", "step": "int64"}).merge(windows.astype({"rank": "int64", "step": "int64"}),
                                                                   on=["rank", "step"], how="left")
    return frame.astype({"window_start_ns": "Int64", "window_end_ns": "Int64"})


def step_metrics(report: Report):
    """One row per rank and step: the report's step metrics as its JSON has them, the window named apart from
    the host range (``window_start_ns``, ``window_end_ns``); ``step`` null for a whole-trace window."""
    # lazy: as in export_parquet
    import msgspec
    import pandas as pd

    rows = []
    for r in report.ranks:
        for s in r.steps:
            row = {k: v for k, v in msgspec.structs.asdict(s).items() if k not in _NESTED}
            window = {"window_start_ns": row.pop("start_ns"), "window_end_ns": row.pop("end_ns")}
            rows.append({"rank": r.rank, "step": row.pop("step"), **window, **row})
    frame = pd.DataFrame(rows)
    nullable = {k: "Int64" for k in ("step", "wait_ns", "transfer_ns", "exposed_wait_ns", "perfect_overlap_step_ns")
                if k in frame}
    return frame.astype(nullable) if len(frame) else frame


def collective_metrics(report: Report):
    """One row per collective instance of every rank, as the report counts it: its ``exposed_ns`` and, when it
    was matched across ranks, the rank's ``wait_ns`` (its duration minus the instance's transfer time) and the
    instance's ``transfer_ns`` (null when unmatched; docs/metrics.md, "Wait and transfer")."""
    # lazy: as in export_parquet
    import msgspec
    import pandas as pd

    own = {}
    if report.cross_rank is not None:
        # A member's start and end are on the reference rank's clock where its offset was applied: back on
        # its own clock, they find its row among the rank's collectives.
        shift = {r.rank: (r.clock_offset_ns or 0) if r.clock_corrected else 0 for r in report.cross_rank.ranks}
        for m in report.cross_rank.collectives:
            if m.starts_ns is None or m.ends_ns is None:
                continue
            for rank, start, end in zip(m.ranks, m.starts_ns, m.ends_ns):
                key = (rank, start + shift.get(rank, 0), end - start)
                own.setdefault(key, []).append((end - start - m.transfer_ns, m.transfer_ns))
    rows = []
    for c in report.collectives:
        row = msgspec.structs.asdict(c)
        found = own.get((c.rank, c.start_ns, c.duration_ns))
        row["wait_ns"], row["transfer_ns"] = found.pop(0) if found else (None, None)
        rows.append(row)
    frame = pd.DataFrame(rows)
    return frame.astype({k: "Int64" for k in ("step", "bytes", "seq", "group_size", "wait_ns", "transfer_ns")}) \
        if len(frame) else frame
