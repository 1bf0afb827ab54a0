"""The tables layer's entries: RankTraces as raw column bytes and a description, and back.

Each column is written as its bytes, 64-byte aligned, and read back as a view of the entry's buffer (no copy,
no parse): a label column as its codes and categories, a string column as codes over its distinct strings
(-1 for None). A table holding anything else (a NaN among strings, a value of another type) is not cached.
"""

from __future__ import annotations

import numpy as np

from .model import RankTrace
from .model.columns import factorize
from .model.table import Labels, Table

_ALIGN = 64


def encode(traces) -> tuple[list, list, int] | None:
    """(the description, the column pieces (bytes-like), their length) of ``traces``; None when a table holds
    something this layout does not keep."""
    chunks: list = []
    offset = 0

    def add(arr: np.ndarray) -> tuple:
        nonlocal offset
        arr = np.ascontiguousarray(arr)
        pad = -offset % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        chunks.append(memoryview(arr).cast("B") if arr.size else b"")
        spec = (arr.dtype.str, offset, arr.nbytes)
        offset += arr.nbytes
        return spec

    described = []
    for t in traces:
        tables = {}
        for name in ("device_ops", "host_ops", "collectives", "steps", "threads"):
            frame = getattr(t, name)
            cols = []
            for c, col in frame.items():
                if isinstance(col, Labels):
                    cats = col.categories.tolist()
                    if any(type(v) is not str for v in cats):
                        return None
                    cols.append((c, "category", add(col.codes), cats, False))
                    continue
                dtype = col.dtype
                if dtype == object:
                    # Codes over the distinct strings, -1 for None: exact (a NaN would not be, so such a
                    # column is not cached), and small.
                    arr = col
                    codes, uniques = factorize(arr)
                    values = uniques
                    missing = arr[codes == -1]
                    if any(type(v) is not str for v in values) or not (missing == None).all():  # noqa: E711
                        return None
                    cols.append((c, "object", add(codes.astype(np.int32)), values, None))
                elif isinstance(dtype, np.dtype) and dtype.kind in "iufb":
                    cols.append((c, "array", add(col), None, None))
                else:
                    return None
            tables[name] = cols
        described.append((t.meta, tables))
    return described, chunks, offset


def decode(data: memoryview, described) -> list:
    """The RankTraces of an entry's column bytes and description; the columns are views of ``data``."""
    def array(spec) -> np.ndarray:
        dtype, offset, nbytes = spec
        dt = np.dtype(dtype)
        return np.frombuffer(data, dt, nbytes // dt.itemsize, offset)

    out = []
    for meta, tables in described:
        frames = {}
        for name, cols in tables.items():
            built = {}
            for c, kind, spec, values, ordered in cols:
                if kind == "category":
                    built[c] = Labels(array(spec), values)
                elif kind == "object":
                    built[c] = np.array(values + [None], dtype=object)[array(spec)]   # code -1: the None
                else:
                    built[c] = array(spec)
            frames[name] = Table(built)
        out.append(RankTrace(meta=meta, **frames))
    return out
