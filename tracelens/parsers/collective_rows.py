"""The collective table of any format: one row per comm activity (and per gloo collective), with the best
metadata the trace gives (the kernel's own collective args, the enclosing ``record_param_comms``, the
``nccl:*`` annotation, NCCL's own payload), described once per distinct combination."""

from __future__ import annotations

import functools

import numpy as np

from ..model import COLLECTIVE_COLUMNS, classify, linking
from ..model.columns import Lookup, categorical_of, factorize, isin, mask, unique_rows


def collective_rows(device: dict, host: dict, comm_meta: dict, parent) -> tuple[dict, int]:
    """One row per comm activity (and per gloo collective), with the best metadata available, and the count
    of comm kernels that share one described NCCL range with others.

    Metadata sources in order: the kernel's own collective args, the enclosing ``record_param_comms``,
    then the enclosing ``nccl:*`` annotation (older traces: only ``Input Dims``/``Input type``), then
    the nearest enclosing NCCL API range described by its NVTX payload (nsys: table ``nvtx``).
    """
    meta_cols = ["collective", "dtype", "in_nelems", "out_nelems", "group_size", "pg_name", "pg_desc", "seq",
                 "dims_nelems", "input_type", "bytes", "root", "peer", "redop"]
    names = Lookup(host["name"])
    rpc = mask(host["name"], lambda n: n == "record_param_comms")
    scope_ann = mask(host["name"], lambda n: n.startswith("nccl:"))
    n_dev, n_host = len(device["start_ns"]), len(host["start_ns"])
    comm_rows = np.flatnonzero(isin(device["kind"], ("comm",)))
    launches = device["launch_idx"][comm_rows]
    rpc_row = linking.nearest_ancestor(parent, launches, rpc, include_self=False)
    ann_row = linking.nearest_ancestor(parent, launches, scope_ann, include_self=False)
    gloo_rows = np.flatnonzero(host["comm_kind"] == "gloo")
    given = {c: comm_meta[c] for c in ("table", "row", *meta_cols)}
    table, row = given["table"], given["row"]
    nccl_range = np.zeros(n_host, bool)
    on = (table == "nvtx") & (row >= 0) & (row < n_host)
    nccl_range[row[on]] = True
    api_row = linking.nearest_ancestor(parent, launches, nccl_range, include_self=False) if on.any() else \
        np.full(launches.size, -1, np.int64)
    # A range that launched several comm kernels (a large group, several communicators) describes them
    # together: its size belongs to none of them alone.
    shared = api_row >= 0
    shared[shared] = np.bincount(api_row[shared])[api_row[shared]] > 1
    # Only the metadata rows a comm activity reads are described: nsys input describes every NCCL call,
    # though only the ranges that launched a kernel matter.
    used_dev, used_host = np.zeros(n_dev + 1, bool), np.zeros(n_host + 1, bool)
    used_dev[comm_rows] = True
    used_host[np.concatenate([rpc_row, ann_row, api_row, gloo_rows])] = True      # -1 marks the spare last slot
    used_dev[-1] = used_host[-1] = False
    in_dev, in_host = (row >= 0) & (row < n_dev), (row >= 0) & (row < n_host)
    keep = np.where(table == "device", used_dev[np.where(in_dev, row, -1)], used_host[np.where(in_host, row, -1)])
    sel = np.flatnonzero(keep)
    if sel.size:        # one row per (table, row), the first
        _, once, _ = unique_rows(np.stack([factorize(table[sel])[0], row[sel]], axis=1))
        sel = sel[np.sort(once)]
    cm = {c: v[sel] for c, v in given.items()}
    # Each metadata row's description (every field but the per-collective sequence number) as a small id:
    # a run repeats a handful of descriptions over 10^5 rows. Id 0 is "no metadata".
    none = (None,) * len(meta_cols)
    tuples = [none]
    key = np.zeros(sel.size, dtype=np.int64)
    if sel.size:
        codes = np.stack([factorize(cm[c])[0] for c in meta_cols if c != "seq"], axis=1)
        _, first, inverse = unique_rows(codes)
        key = inverse + 1
        values = [cm[c][first].tolist() for c in meta_cols]      # one row per description
        tuples += [tuple(None if c == "seq" else v[i] for c, v in zip(meta_cols, values)) for i in range(first.size)]
    table, row, seq = cm["table"], cm["row"], cm["seq"]

    def per_row(which: str, n: int, where=None) -> tuple[np.ndarray, np.ndarray]:
        """(description id, seq) of each row of a table, 0 and -1 where it carries no metadata."""
        ids, seqs = np.zeros(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
        sel = (table == which) & (row >= 0) & (row < n)
        if where is not None:
            sel &= where
        ids[row[sel]], seqs[row[sel]] = key[sel], seq[sel]
        return ids, seqs

    # Each row is described by (its metadata, its annotation's, the annotation's name, the kernel's name);
    # a run repeats a handful of those thousands of times, so each distinct combination is described once.
    dev_ids, dev_seq = per_row("device", n_dev, present(cm["collective"]) if sel.size else None)
    host_ids, host_seq = per_row("host", n_host)
    nvtx_ids, _ = per_row("nvtx", n_host)
    dev_src, dev_src_seq = dev_ids[comm_rows], dev_seq[comm_rows]
    host_cat, dev_cat = categorical_of(host["name"]), categorical_of(device["name"])
    host_codes = host_cat.codes.astype(np.int64) if host_cat is not None else np.arange(n_host)
    dev_codes = dev_cat.codes.astype(np.int64)[comm_rows] if dev_cat is not None else comm_rows

    def at(values: np.ndarray, rows: np.ndarray, missing: int) -> np.ndarray:
        return np.where(rows >= 0, values[np.maximum(rows, 0)], missing) if values.size else \
            np.full(rows.size, missing, dtype=np.int64)

    seq_out = np.concatenate([np.where(dev_src > 0, dev_src_seq, at(host_seq, rpc_row, -1)),
                              np.full(gloo_rows.size, -1, np.int64)])
    keys = np.stack([
        np.concatenate([np.where(dev_src > 0, dev_src, at(host_ids, rpc_row, 0)), np.zeros(gloo_rows.size, np.int64)]),
        np.concatenate([at(host_ids, ann_row, 0), at(host_ids, gloo_rows, 0)]),
        np.concatenate([at(host_codes, ann_row, -2), at(host_codes, gloo_rows, -2)]),   # -2: no annotation
        np.concatenate([dev_codes, np.full(gloo_rows.size, -2)]),                              # -2: no kernel
        np.concatenate([at(nvtx_ids, api_row, 0), np.zeros(gloo_rows.size, np.int64)]),
        np.concatenate([shared, np.zeros(gloo_rows.size, bool)])], axis=1).astype(np.int64)
    first_row = np.concatenate([ann_row, gloo_rows])
    kernel_rows = np.concatenate([comm_rows, np.full(gloo_rows.size, -1)])
    uniq, pick, inverse = unique_rows(keys)
    kernel_name = Lookup(device["name"])
    described = []
    for (src, ann, ann_code, _, api, one_of_many), i in zip(uniq.tolist(), pick.tolist()):
        s, t = tuples[src], tuples[ann]
        described.append(_describe(*s[:8], t[8], t[9], tuples[api], names[first_row[i]] if ann_code != -2 else None,
                                   kernel_name[kernel_rows[i]] if kernel_rows[i] >= 0 else None, bool(one_of_many)))
    cols = ["op", "dtype", "in_nelems", "out_nelems", "bytes", "group_size", "pg_name", "pg_desc", "seq", "root",
            "peer", "redop"]
    carrier = np.where(rpc_row >= 0, rpc_row, np.where(api_row >= 0, api_row, ann_row))
    frame = {
        "device_idx": kernel_rows.astype(np.int64),
        "host_idx": np.concatenate([carrier, gloo_rows]).astype(np.int64),
    }
    for j, c in enumerate(cols):
        if c == "seq":
            frame[c] = seq_out.astype(np.int64)
        elif COLLECTIVE_COLUMNS[c] == "int64":
            frame[c] = np.array([d[j] for d in described], dtype=np.int64)[inverse]
        else:
            frame[c] = np.array([d[j] for d in described] + [None], dtype=object)[:-1][inverse]
    return frame, int(shared.sum())


def _num(v) -> int:
    return -1 if v is None or v != v else int(v)  # v != v: NaN from a missing metadata row


def _str(v):
    return None if v is None or v != v else v


@functools.lru_cache(maxsize=4096)  # a run repeats a handful of distinct collectives thousands of times
def _describe(coll, dtype, in_n, out_n, group, pg_name, pg_desc, seq, dims, in_type, nccl, ann_name, kernel_name,
              one_of_many):
    """``nccl``: the metadata tuple of the NCCL range around the launch (collective, group size and
    communicator at the metadata's positions, then bytes, root, peer, redop), all None without one."""
    coll, dtype, in_type = _str(coll), _str(dtype), _str(in_type)
    op = classify.canonical_op(coll) or classify.canonical_op(ann_name) or _str(nccl[0]) or \
        classify.kernel_op(kernel_name)
    dtype = dtype or in_type
    in_n, out_n, group = _num(in_n), _num(out_n), _num(group)
    if in_n < 0 and out_n < 0:
        in_n = _num(dims)
    group = group if group >= 0 else _num(nccl[4])
    size = classify.message_bytes(op, in_n, out_n, classify.dtype_size(dtype), group)
    if size < 0 and not one_of_many:
        size = _num(nccl[10])
    return (op, dtype, in_n, out_n, size, group, _str(pg_name) or _str(nccl[5]), _str(pg_desc), _num(seq),
            _num(nccl[11]), _num(nccl[12]), _str(nccl[13]))


def present(values: np.ndarray) -> np.ndarray:
    """Per element: not None and not NaN (``pandas.notna`` of an object array)."""
    return np.fromiter((v is not None and v == v for v in values.tolist()), bool, len(values))
