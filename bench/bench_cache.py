"""Warm-cache formats: how fast each reads a trace's cached tables back as the model's frames.

    python bench/bench_cache.py [TRACE] [--runs 9]

For the tables of TRACE (default: the 54 MB corpus trace) it writes, then reads back as many times, each
candidate: tracelens' own entry (tracelens/cache.py: one file, raw column buffers, CRC-checked), one
``.npy`` per column, Arrow IPC (Feather v2) uncompressed and lz4, and Parquet (pyarrow, snappy). A read
is only done when the frames are the model's again (categoricals with object categories, object columns of
str/None), so the Arrow and Parquet reads include converting pandas' Arrow-backed strings back. Prints
each one's median and fastest read and its size. In-process, after the imports: the whole warm report
is timed from outside with farm-bench (bench/RESULTS.md).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import tracelens  # noqa: E402
from tracelens import cache  # noqa: E402
from tracelens.model.table import Labels, Table  # noqa: E402
from tracelens.options import ReportOptions  # noqa: E402
from tracelens.parsers import cache_options  # noqa: E402

DEFAULT = ROOT.parent / "shared/corpus/hta/df_index_resolver/df_index_resolver.json.gz"
TABLES = ("device_ops", "host_ops", "collectives", "steps", "threads")


def frame_of(cols: dict) -> Table:
    """The model's Table of columns read back through pandas (categoricals as Labels)."""
    return Table({c: Labels(v.codes, v.categories.to_numpy(dtype=object)) if isinstance(v, pd.Categorical) else v
                  for c, v in cols.items()})


def model_frame(frame: pd.DataFrame, like: pd.DataFrame) -> Table:
    """``frame`` (as Arrow gave it back) with the model's dtypes: object columns and object categories."""
    cols = {}
    for c in like.columns:
        col, want = frame[c], like[c].dtype
        if isinstance(want, pd.CategoricalDtype):
            cat = col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col)
            cols[c] = pd.Categorical.from_codes(cat.codes, dtype=pd.CategoricalDtype(
                pd.Index(cat.categories.to_numpy(dtype=object), dtype=object)))
        elif want == object:
            arr = col.to_numpy(dtype=object, na_value=None)
            cols[c] = arr
        else:
            cols[c] = col.to_numpy()
    return frame_of(cols)


def npy_write(folder: Path, trace) -> None:
    import pickle

    folder.mkdir()
    layout = {}
    for name in TABLES:
        frame = getattr(trace, name).to_pandas()
        layout[name] = []
        for i, c in enumerate(frame.columns):
            col = frame[c]
            if isinstance(col.dtype, pd.CategoricalDtype):
                np.save(folder / f"{name}.{i}.npy", col.cat.codes.to_numpy())
                layout[name].append((c, "category", col.cat.categories.tolist()))
            elif col.dtype == object:
                codes, uniques = pd.factorize(col.to_numpy())
                np.save(folder / f"{name}.{i}.npy", codes.astype(np.int32))
                layout[name].append((c, "object", uniques.tolist()))
            else:
                np.save(folder / f"{name}.{i}.npy", col.to_numpy())
                layout[name].append((c, "array", None))
    (folder / "layout.pkl").write_bytes(pickle.dumps((trace.meta, layout)))


def npy_read(folder: Path):
    import pickle

    meta, layout = pickle.loads((folder / "layout.pkl").read_bytes())
    frames = {}
    for name, cols in layout.items():
        built = {}
        for i, (c, kind, values) in enumerate(cols):
            arr = np.load(folder / f"{name}.{i}.npy")
            if kind == "category":
                built[c] = pd.Categorical.from_codes(arr, dtype=pd.CategoricalDtype(pd.Index(values, dtype=object)))
            elif kind == "object":
                built[c] = np.array(values + [None], dtype=object)[arr]
            else:
                built[c] = arr
        frames[name] = frame_of(built)
    return tracelens.RankTrace(meta=meta, **frames) if hasattr(tracelens, "RankTrace") else frames


def arrow_write(folder: Path, trace, how: str) -> None:
    folder.mkdir()
    for name in TABLES:
        table = pa.Table.from_pandas(getattr(trace, name).to_pandas(), preserve_index=False)
        if how == "parquet":
            pq.write_table(table, folder / f"{name}.parquet")
        else:
            feather.write_feather(table, folder / f"{name}.arrow", compression=how)


def arrow_read(folder: Path, trace, how: str):
    out = {}
    for name in TABLES:
        if how == "parquet":
            frame = pq.read_table(folder / f"{name}.parquet").to_pandas()
        else:
            with pa.memory_map(str(folder / f"{name}.arrow")) as src:
                frame = pa.ipc.open_file(src).read_all().to_pandas()
        out[name] = model_frame(frame, getattr(trace, name).to_pandas())
    return out


def size_of(p: Path) -> int:
    return p.stat().st_size if p.is_file() else sum(f.stat().st_size for f in p.rglob("*") if f.is_file())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=9)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        os.environ[cache.CACHE_ENV] = str(tmp / "cache")
        (trace,) = tracelens.load(str(a.trace), jobs=0, cache=False)
        key = cache.TABLES.key(a.trace, cache_options(ReportOptions()))
        cache.TABLES.put(key, [trace])
        entry = cache.TABLES.entry(key)
        npy_write(tmp / "npy", trace)
        for how in ("uncompressed", "lz4", "parquet"):
            arrow_write(tmp / how, trace, how)
        candidates = {
            "tracelens entry (raw buffers, CRC)": (entry, lambda: cache.TABLES.get(key)),
            "npy per column": (tmp / "npy", lambda: npy_read(tmp / "npy")),
            "Arrow IPC uncompressed": (tmp / "uncompressed", lambda: arrow_read(tmp / "uncompressed", trace,
                                                                                 "uncompressed")),
            "Arrow IPC lz4": (tmp / "lz4", lambda: arrow_read(tmp / "lz4", trace, "lz4")),
            "Parquet (snappy)": (tmp / "parquet", lambda: arrow_read(tmp / "parquet", trace, "parquet")),
        }
        times: dict[str, list[float]] = {k: [] for k in candidates}
        for _ in range(a.runs):            # rounds alternate: a busy spell of the machine hits every format
            for k, (_, read) in candidates.items():
                t = time.perf_counter()
                got = read()
                times[k].append(time.perf_counter() - t)
                assert got is not None, k
        print(f"{a.trace.name}: {len(trace.device_ops)} device ops, {len(trace.host_ops)} host ops; "
              f"read back as model frames, {a.runs} runs each")
        for k, (where, _) in candidates.items():
            v = sorted(times[k])
            print(f"  {k:36s} median {statistics.median(v) * 1e3:7.1f} ms  fastest {v[0] * 1e3:7.1f} ms  "
                  f"{size_of(where) / 1e6:6.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
