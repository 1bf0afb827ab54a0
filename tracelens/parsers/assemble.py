"""Turn a parser's raw tables into a validated RankTrace (shared by every input format).

A format parser supplies device rows, host rows, step spans, thread names and the collective metadata it
found, all as plain columns with int64 epoch-ns times. This module adds the structure: host nesting,
launch links, step membership, comm classification, the collectives table, and same-stream clipping.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .. import classify, linking
from ..model import (COLLECTIVE_COLUMNS, DEVICE_COLUMNS, HOST_COLUMNS, STEP_COLUMNS, THREAD_COLUMNS,
                     RankTrace, RunMeta)

_LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime")


def build(meta: RunMeta, device: pd.DataFrame, host: pd.DataFrame, steps: pd.DataFrame,
          threads: pd.DataFrame, comm_meta: pd.DataFrame, comm_rules=()) -> RankTrace:
    host = host.reset_index(drop=True)
    device = device.reset_index(drop=True)
    # One int64 per (pid, tid); tids are 32-bit values (negative ones were made positive by newer writers).
    thread_key = (host["pid"].to_numpy() << 32) | (host["tid"].to_numpy() & 0xFFFFFFFF)
    parent = linking.host_parents(thread_key, host["start_ns"].to_numpy(), host["end_ns"].to_numpy())
    host["parent"] = parent
    host["comm_kind"] = _gloo_flags(host)

    is_launch = host["cat"].isin(_LAUNCH_CATS).to_numpy()
    launch_idx = linking.link_by_correlation(device["correlation"].to_numpy(),
                                             host["correlation"].to_numpy()[is_launch],
                                             np.flatnonzero(is_launch))
    device["launch_idx"] = launch_idx
    device["op_idx"] = linking.take(parent, launch_idx, -1)
    launch_time = np.where(launch_idx >= 0, linking.take(host["start_ns"].to_numpy(), launch_idx, 0),
                           device["start_ns"].to_numpy())
    device["step"] = linking.step_of(launch_time, steps["start_ns"].to_numpy(), steps["end_ns"].to_numpy(),
                                     steps["step"].to_numpy())
    unlinked = int(((launch_idx < 0) & (device["kind"] != "sync").to_numpy()).sum())
    meta.warnings.add("unlinked-device-ops", "device activities whose launch call is not in the trace "
                      "(step taken from their own start time)", unlinked)

    names = host["name"]
    scope = (names.eq("record_param_comms") | names.str.startswith(("nccl:", "c10d::"))).to_numpy(dtype=bool)
    scope_row = linking.nearest_ancestor(parent, device["launch_idx"].to_numpy(), scope, include_self=False)
    _classify(device, scope_row, comm_meta, comm_rules)
    device = _clip_same_stream(device, meta)
    collectives = _collectives(device, host, comm_meta, parent)
    device = device.drop(columns=["cross_device"])
    trace = RankTrace(
        meta=meta,
        device_ops=_typed(device, DEVICE_COLUMNS),
        host_ops=_typed(host, HOST_COLUMNS),
        collectives=_typed(collectives, COLLECTIVE_COLUMNS),
        steps=_typed(steps, STEP_COLUMNS),
        threads=_typed(threads, THREAD_COLUMNS),
    )
    trace.validate()
    return trace


def _gloo_flags(host: pd.DataFrame) -> np.ndarray:
    """``gloo`` for gloo:* collectives on a thread other than the training loop's (kineto-format.md §11)."""
    out = np.full(len(host), None, dtype=object)
    is_gloo = host["name"].str.startswith("gloo:").to_numpy(dtype=bool)
    if not is_gloo.any():
        return out
    main = linking.main_thread(host)
    off_main = ~((host["pid"].to_numpy() == main[0]) & (host["tid"].to_numpy() == main[1])) if main else True
    out[is_gloo & off_main] = "gloo"
    return out


def _classify(device: pd.DataFrame, scope_row: np.ndarray, comm_meta: pd.DataFrame, comm_rules) -> None:
    n = len(device)
    kind = device["kind"].to_numpy(dtype=object).copy()
    comm_kind = np.full(n, None, dtype=object)
    rule = np.full(n, None, dtype=object)
    is_kernel = kind == "compute"
    is_copy = kind == "memcpy"

    dev_meta = comm_meta[(comm_meta["table"] == "device") & comm_meta["collective"].notna()]
    has_args = np.zeros(n, dtype=bool)
    has_args[dev_meta["row"].to_numpy()] = True
    has_args &= is_kernel
    names = device["name"]
    name_kind, name_rule = classify.match_names(names, classify.DEFAULT_RULES + tuple(comm_rules))
    by_name = is_kernel & (name_kind != None)  # noqa: E711 (element-wise)
    by_scope = is_kernel & (scope_row >= 0)
    ce = is_copy & (names.str.contains("PtoP", regex=False).to_numpy() | device["cross_device"].to_numpy())

    for mask, ck, r in ((ce, "ce_copy", "ce-copy"), (by_scope, "nccl", "comm-scope"),
                        (by_name, name_kind, name_rule), (has_args, "nccl", "collective-args")):
        # Applied lowest priority first so the strongest signal's label wins.
        comm_kind[mask] = ck[mask] if isinstance(ck, np.ndarray) else ck
        rule[mask] = r[mask] if isinstance(r, np.ndarray) else r
        kind[mask] = "comm"
    # A named RCCL/NCCL family keeps its more specific label over the generic collective-args one.
    named = has_args & by_name
    comm_kind[named] = name_kind[named]
    device["kind"] = kind
    device["comm_kind"] = comm_kind
    device["rule"] = rule


def _clip_same_stream(device: pd.DataFrame, meta: RunMeta) -> pd.DataFrame:
    """Cut an activity's end at the next one's start on the same stream (ROCm overruns), and count it."""
    work = (device["kind"] != "sync").to_numpy()
    if work.sum() < 2:
        return device
    sub = device.loc[work, ["device", "stream", "start_ns", "end_ns"]]
    order = np.lexsort((sub["start_ns"].to_numpy(), sub["stream"].to_numpy(), sub["device"].to_numpy()))
    rows = sub.index.to_numpy()[order]
    dev, stream = sub["device"].to_numpy()[order], sub["stream"].to_numpy()[order]
    start, end = sub["start_ns"].to_numpy()[order], sub["end_ns"].to_numpy()[order]
    same_lane = (dev[:-1] == dev[1:]) & (stream[:-1] == stream[1:])
    over = same_lane & (end[:-1] > start[1:])
    if not over.any():
        return device
    device = device.copy()
    fix = rows[:-1][over]
    device.loc[fix, "end_ns"] = start[1:][over]
    meta.warnings.add("same-stream-overlap", "activities overran the next one on the same stream and were clipped",
                      int(over.sum()))
    return device


def _collectives(device: pd.DataFrame, host: pd.DataFrame, comm_meta: pd.DataFrame, parent) -> pd.DataFrame:
    """One row per comm activity (and per gloo collective), with the best metadata available.

    Metadata sources in order: the kernel's own collective args, the enclosing ``record_param_comms``,
    then the enclosing ``nccl:*`` annotation (older traces: only ``Input Dims``/``Input type``).
    """
    meta_cols = ["collective", "dtype", "in_nelems", "out_nelems", "group_size", "pg_name", "pg_desc", "seq",
                 "dims_nelems", "input_type"]
    host_meta = comm_meta[comm_meta["table"] == "host"].drop_duplicates("row").set_index("row")[meta_cols]
    dev_meta = comm_meta[comm_meta["table"] == "device"].drop_duplicates("row").set_index("row")[meta_cols]
    names = host["name"].to_numpy(dtype=object)
    rpc = host["name"].eq("record_param_comms").to_numpy(dtype=bool)
    scope_ann = host["name"].str.startswith("nccl:").to_numpy(dtype=bool)

    comm_rows = np.flatnonzero((device["kind"] == "comm").to_numpy())
    launches = device["launch_idx"].to_numpy()[comm_rows]
    rpc_row = linking.nearest_ancestor(parent, launches, rpc, include_self=False)
    ann_row = linking.nearest_ancestor(parent, launches, scope_ann, include_self=False)
    gloo_rows = np.flatnonzero((host["comm_kind"] == "gloo").to_numpy())

    own = dev_meta.reindex(comm_rows).reset_index(drop=True)
    from_rpc = host_meta.reindex(rpc_row).reset_index(drop=True)
    src = own.where(own["collective"].notna(), from_rpc)
    src = pd.concat([src, pd.DataFrame(index=range(gloo_rows.size), columns=meta_cols)], ignore_index=True)
    ann = pd.concat([host_meta.reindex(ann_row), host_meta.reindex(gloo_rows)], ignore_index=True)
    ann_names = np.concatenate([np.where(ann_row >= 0, names[np.maximum(ann_row, 0)] if len(names) else None, None),
                                names[gloo_rows]])
    kernel_names = np.concatenate([device["name"].to_numpy(dtype=object)[comm_rows], np.full(gloo_rows.size, None)])
    frame = pd.DataFrame({
        "device_idx": np.concatenate([comm_rows, np.full(gloo_rows.size, -1)]).astype(np.int64),
        "host_idx": np.concatenate([np.where(rpc_row >= 0, rpc_row, ann_row), gloo_rows]).astype(np.int64),
    })
    records = [_describe(*row) for row in zip(
        src["collective"].tolist(), src["dtype"].tolist(), src["in_nelems"].tolist(), src["out_nelems"].tolist(),
        src["group_size"].tolist(), src["pg_name"].tolist(), src["pg_desc"].tolist(), src["seq"].tolist(),
        ann["dims_nelems"].tolist(), ann["input_type"].tolist(), ann_names.tolist(), kernel_names.tolist())]
    cols = ["op", "dtype", "in_nelems", "out_nelems", "bytes", "group_size", "pg_name", "pg_desc", "seq"]
    described = pd.DataFrame.from_records(records, columns=cols) if records else pd.DataFrame(columns=cols)
    return pd.concat([frame, described], axis=1)


def _num(v) -> int:
    return -1 if v is None or v != v else int(v)  # v != v: NaN from a missing metadata row


def _str(v):
    return None if v is None or v != v else v


def _describe(coll, dtype, in_n, out_n, group, pg_name, pg_desc, seq, dims, in_type, ann_name, kernel_name):
    coll, dtype, in_type = _str(coll), _str(dtype), _str(in_type)
    op = classify.canonical_op(coll) or classify.canonical_op(ann_name) or classify.kernel_op(kernel_name)
    dtype = dtype or in_type
    in_n, out_n, group = _num(in_n), _num(out_n), _num(group)
    if in_n < 0 and out_n < 0:
        in_n = _num(dims)
    size = classify.message_bytes(op, in_n, out_n, classify.dtype_size(dtype), group)
    return op, dtype, in_n, out_n, size, group, _str(pg_name), _str(pg_desc), _num(seq)


def _typed(frame: pd.DataFrame, columns: dict[str, str]) -> pd.DataFrame:
    """Exactly the contract's columns, in order, with the contract's dtypes (-1 for missing ints)."""
    out = {}
    for c, t in columns.items():
        col = frame[c].reset_index(drop=True) if c in frame.columns else pd.Series([None] * len(frame), dtype=object)
        if t == "int64" and col.dtype != np.int64:
            col = pd.to_numeric(col, errors="coerce").fillna(-1)
        out[c] = col.astype(t)
    return pd.DataFrame(out)
