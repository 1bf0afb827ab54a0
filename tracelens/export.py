"""Write the trace model as Parquet, one file per table with ``rank`` as a column, for other tools."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from .model import RankTrace

TABLES = ("device_ops", "host_ops", "collectives", "steps", "threads")


def export_parquet(traces: list[RankTrace], out_dir: str | Path) -> list[Path]:
    """Write ``<table>.parquet`` for every table plus ``ranks.parquet`` (run metadata); returns the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for table in TABLES:
        frames = [getattr(t, table).to_pandas().assign(rank=t.meta.rank) for t in traces]
        frame = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
        frame = frame[["rank"] + [c for c in frame.columns if c != "rank"]]
        path = out / f"{table}.parquet"
        frame.to_parquet(path, index=False)
        written.append(path)
    ranks = pd.DataFrame([{
        "rank": t.meta.rank, "rank_rule": t.meta.rank_rule, "world_size": t.meta.world_size,
        "backend": t.meta.backend, "source": t.meta.source, "format": t.meta.format,
        "base_ns": t.meta.base_ns, "device_names": list(t.meta.device_names),
    } for t in traces])
    path = out / "ranks.parquet"
    ranks.to_parquet(path, index=False)
    written.append(path)
    return written
