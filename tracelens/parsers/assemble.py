"""Turn a parser's raw tables into a validated RankTrace (shared by every input format).

A format parser supplies device rows, host rows, step spans, thread names and the collective metadata it
found, all as plain columns with int64 epoch-ns times. This module adds the structure: host nesting,
launch links, step membership, comm classification, the collectives table, and same-stream clipping.
"""

from __future__ import annotations

import re

import numpy as np

from ..model import classify, linking
from ..model.columns import (categorical, categorical_of, distinct, far_times, isin, mask, median_start,
                             sorted_labels)
from ..model.table import Labels, Table, objects
from ..model import (COLLECTIVE_COLUMNS, DEVICE_COLUMNS, HOST_COLUMNS, STEP_COLUMNS, THREAD_COLUMNS,
                     RankTrace, RunMeta)
from .collective_rows import collective_rows, present

_NCCL_API = re.compile(r"nccl[A-Z]\w*$")
_STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
COMM_META_COLUMNS = {"table": "object", "row": "int64", "collective": "object", "in_nelems": "int64",
                     "out_nelems": "int64", "dtype": "object", "group_size": "int64", "pg_name": "object",
                     "pg_desc": "object", "seq": "int64", "dims_nelems": "int64", "input_type": "object",
                     "bytes": "int64", "root": "int64", "peer": "int64", "redop": "object"}


def comm_meta_columns(columns: dict | None = None) -> dict[str, np.ndarray]:
    """The collective-metadata table (see :func:`build`) from columns named like COMM_META_COLUMNS, as typed
    arrays (int64, object): assembly reads it column by column, and never as a frame."""
    n = len(columns.get("row", ())) if columns else 0
    columns = columns or {}
    return {c: np.asarray(columns.get(c, np.full(n, -1)), dtype=np.int64) if t == "int64"
            else _object_array(columns.get(c, [None] * n)) for c, t in COMM_META_COLUMNS.items()}


def _object_array(values) -> np.ndarray:
    arr = values if isinstance(values, np.ndarray) else np.asarray(values, dtype=object)
    return arr if arr.dtype == object else arr.astype(object)


def steps_from_host(host, pattern: str | None = None, warnings=None) -> Table:
    """Step spans from host ranges (a Table or a dict of columns): ``ProfilerStep#N``, or the ranges whose name matches ``pattern``.

    With a pattern, a capture group of digits numbers the steps; otherwise they are numbered 0, 1, ...
    in time order. Nested or overlapping matches keep the outermost, earliest range. A number seen again
    later (a restarted step counter) keeps its first range, counted in ``warnings`` (``duplicate-steps``).
    """
    rx = re.compile(pattern) if pattern else _STEP_NAME
    match = rx.search if pattern else rx.match
    col = host["name"]
    cat = categorical_of(col)
    if cat is not None:  # match each distinct name once
        per_cat = [match(c) if isinstance(c, str) else None for c in cat.categories]
        codes = cat.codes
        rows_hit = np.flatnonzero(np.isin(codes, [j for j, m in enumerate(per_cat) if m]))
        hits = [(int(i), per_cat[codes[i]]) for i in rows_hit]
    else:
        hits = [(i, m) for i, m in ((i, match(n) if isinstance(n, str) else None)
                                    for i, n in enumerate(np.asarray(col, dtype=object).tolist())) if m]
    if not pattern and warnings is not None:
        _unnumbered_steps(col, cat, warnings)
    start, end = np.asarray(host["start_ns"]), np.asarray(host["end_ns"])
    rows = sorted(((int(start[i]), -int(end[i]), i, m) for i, m in hits))
    kept, last_end = [], None
    for s, neg_e, i, m in rows:
        if last_end is not None and s < last_end:
            continue
        kept.append((i, m))
        last_end = -neg_e
    nums = []
    for k, (i, m) in enumerate(kept):
        digits = next((g for g in m.groups() if g and g.isdigit()), None) if m.groups() else None
        nums.append(int(digits) if digits is not None else k)
    huge = [n >= 2**63 for n in nums]
    if any(huge):
        # A step number no int64 holds is no profiler's counter: that range is not taken as a step.
        if warnings is not None:
            warnings.add("step-number-out-of-range", "step ranges numbered past 2**63 - 1 were not taken as steps",
                         sum(huge))
        kept = [x for x, h in zip(kept, huge) if not h]
        nums = [n for n, h in zip(nums, huge) if not h]
    num = np.array(nums, dtype=np.int64)
    _, first = np.unique(num, return_index=True)
    first = np.sort(first)                       # each number's first range, in time order
    rows = np.array([i for i, _ in kept], dtype=np.int64)[first]
    if warnings is not None and first.size < num.size:
        again = sorted(set(np.delete(num, first).tolist()))
        warnings.add("duplicate-steps", f"step number{'s' if len(again) > 1 else ''} "
                     f"{', '.join(map(str, again[:5]))}{', …' if len(again) > 5 else ''} came back later in the trace "
                     "(a restarted step counter?): each keeps its first range, and the later ranges' work is "
                     "outside every step", num.size - first.size)
    return Table({"step": num[first], "start_ns": np.asarray(start[rows], dtype=np.int64),
                     "end_ns": np.asarray(end[rows], dtype=np.int64)})


def drop_far_times(device: dict, host: dict, meta: RunMeta, comm_meta: dict | None = None
                   ) -> tuple[dict, dict, dict | None]:
    """The rows without those whose start or end lies more than :data:`~tracelens.model.columns.FAR_NS` from
    the median start of all the rank's rows, counted in ``far-times``; ``comm_meta`` rows (``table``, ``row``)
    of the rows dropped go too, the others renumbered."""
    dev_s, dev_e = np.asarray(device["start_ns"]), np.asarray(device["end_ns"])
    host_s, host_e = np.asarray(host["start_ns"]), np.asarray(host["end_ns"])
    starts = np.concatenate([dev_s, host_s])
    if not starts.size:
        return device, host, comm_meta
    center = median_start(starts)
    far_dev = far_times(dev_s, dev_e, center)
    far_host = far_times(host_s, host_e, center)
    n = int(far_dev.sum() + far_host.sum())
    if not n:
        return device, host, comm_meta
    meta.warnings.add("far-times", "skipped events whose start or end lies more than a day from the "
                      "trace's median event time (corrupt timestamps, such as a year past 2100): they would "
                      "stretch their step", n)
    if comm_meta is not None and len(comm_meta.get("row", ())):
        table = np.asarray(comm_meta["table"], dtype=object)
        rows = np.asarray(comm_meta["row"], dtype=np.int64)
        keep = np.ones(rows.size, dtype=bool)
        new = rows.copy()
        for names, far in ((("device",), far_dev), (("host", "nvtx"), far_host)):
            pick = np.isin(table, names)
            keep[pick] &= ~far[rows[pick]]
            new[pick] = (np.cumsum(~far) - 1)[rows[pick]]
        comm_meta = {c: (np.asarray(v)[keep] if isinstance(v, np.ndarray) else [x for x, k in zip(v, keep) if k])
                     for c, v in {**comm_meta, "row": new}.items()}
    return ({c: v[~far_dev] for c, v in device.items()}, {c: v[~far_host] for c, v in host.items()}, comm_meta)


def _unnumbered_steps(col, cat, warnings) -> None:
    """``ProfilerStep#abc``: a step range whose number is no number is not a step; said, naming it."""
    names = cat.categories if cat is not None else sorted({n for n in np.asarray(col, dtype=object).tolist()
                                                           if isinstance(n, str)})
    bad = [n for n in names if isinstance(n, str) and n.startswith("ProfilerStep#") and not _STEP_NAME.match(n)]
    if not bad:
        return
    if cat is not None:
        count = int(np.isin(cat.codes, [list(cat.categories).index(n) for n in bad]).sum())
    else:
        count = sum(1 for n in np.asarray(col, dtype=object).tolist() if n in bad)
    shown = ", ".join(repr(n) for n in bad[:3]) + (", …" if len(bad) > 3 else "")
    warnings.add("step-name-not-a-number", f"ProfilerStep ranges whose step number is not a number were not taken "
                 f"as steps: {shown}", count)


_DEVICE_KEY = ("start_ns", "end_ns", "device", "stream", "correlation", "kind", "name")
_HOST_KEY = ("start_ns", "-end_ns", "pid", "tid", "correlation", "external_id", "cat", "name")


def canonical(device: dict, host: dict, comm_meta: dict | None = None) -> tuple[dict, dict, dict | None]:
    """The rows in one order whatever order the file lists its events in: by time, then every other field
    (categories by name, in sorted order), so that ties (kernels starting in the same ns, nested ranges
    with equal bounds) never depend on the file. ``comm_meta`` rows (``table``, ``row``) are renumbered."""
    device, dev_at = _sorted(device, _DEVICE_KEY)
    host, host_at = _sorted(host, _HOST_KEY)
    if comm_meta is not None and (dev_at is not None or host_at is not None) and len(comm_meta.get("row", ())):
        rows = np.asarray(comm_meta["row"]).copy()
        table = np.asarray(comm_meta["table"], dtype=object)
        for names, at in ((("device",), dev_at), (("host", "nvtx"), host_at)):    # nvtx rows are host rows
            pick = np.isin(table, names)
            if at is not None and pick.any():
                rows[pick] = at[rows[pick]]
        comm_meta = {**comm_meta, "row": rows}
    return device, host, comm_meta


def _sorted(cols: dict, key: tuple) -> tuple[dict, np.ndarray | None]:
    """``cols`` with sorted categories and rows in ``key`` order ("-" before a name: descending), and each
    old row's new index (None when nothing moved)."""
    cols = {c: sorted_labels(v) if isinstance(v, Labels) else v for c, v in cols.items()}
    n = len(cols["start_ns"])
    if n < 2:
        return cols, None
    arrays = []
    for k in key:
        v = cols.get(k.lstrip("-"))
        if v is None:
            continue
        v = v.codes.astype(np.int64) if isinstance(v, Labels) else np.asarray(v)
        arrays.append(-v if k.startswith("-") else v)
    order = _lexsort(arrays)
    if (order[1:] > order[:-1]).all():
        return cols, None
    at = np.empty(n, dtype=np.int64)
    at[order] = np.arange(n)
    return {c: v[order] for c, v in cols.items()}, at


def _lexsort(keys: list[np.ndarray]) -> np.ndarray:
    """``np.lexsort`` with ``keys[0]`` the most significant, in a fraction of its time when the first key
    has few ties (start times: bench/RESULTS.md, "parsers/assemble.py"): a stable sort by it, then only the
    rows sharing a value sorted by all keys."""
    order = np.argsort(keys[0], kind="stable")
    first = keys[0][order]
    same = first[1:] == first[:-1]
    if not same.any():
        return order
    tied = np.zeros(first.size, dtype=bool)
    tied[1:] |= same
    tied[:-1] |= same
    at = np.flatnonzero(tied)
    rows = order[at]
    order[at] = rows[np.lexsort([k[rows] for k in keys[:0:-1]] + [first[at]])]
    return order


def build(meta: RunMeta, device, host, steps: Table, threads: Table, comm_meta: dict,
          comm_rules=()) -> RankTrace:
    """The RankTrace of one rank. ``device`` and ``host`` are the parser's rows, as Tables or as dicts of
    columns (arrays, Labels); they are worked on as columns and become Tables once, at the end.
    ``comm_meta``: :func:`comm_meta_columns`."""
    host, device = _columns(host), _columns(device)
    # One int64 per (pid, tid); tids are 32-bit values (negative ones were made positive by newer writers).
    thread_key = (host["pid"] << 32) | (host["tid"] & 0xFFFFFFFF)
    parent = linking.host_parents(thread_key, host["start_ns"], host["end_ns"])
    host["parent"] = parent
    host["comm_kind"] = _gloo_flags(host)

    is_launch = isin(host["cat"], linking.LAUNCH_CATS)
    launch_idx = linking.link_by_correlation(device["correlation"], host["correlation"][is_launch],
                                             np.flatnonzero(is_launch))
    device["launch_idx"] = launch_idx
    device["op_idx"] = linking.take(parent, launch_idx, -1)
    launch_time = np.where(launch_idx >= 0, linking.take(host["start_ns"], launch_idx, 0), device["start_ns"])
    step = linking.step_of(launch_time, steps["start_ns"], steps["end_ns"], steps["step"])
    unlinked = (launch_idx < 0) & ~isin(device["kind"], ("sync",))
    # Launched before the capture began: earlier steps' work, still running when recording started (every
    # real torch.profiler trace has some; a job whose CPU runs ahead has whole steps of it). It was launched
    # in no recorded step, so it belongs to none. Only the rest are launches the trace lost.
    early = unlinked & linking.launched_before_capture(device["correlation"], launch_idx,
                                                       host["correlation"][is_launch])
    device["step"] = np.where(early, -1, step)
    meta.warnings.add("launched-before-capture", "device activities launched before the capture began (earlier "
                      "steps' work, still running when recording started); they belong to no step and are "
                      "reported once as the rank's pre-capture work", int(early.sum()))
    meta.warnings.add("unlinked-device-ops", "device activities whose launch call is not in the trace "
                      "(step taken from their own start time)", int((unlinked & ~early).sum()))

    # Ops that wrap a collective: torch's record_param_comms / nccl:* / c10d::* and NCCL's own API
    # ranges (ncclAllReduce, ncclGroupEnd, ... in nsys NVTX), inside which launched kernels are comm.
    scope = mask(host["name"], lambda n: n == "record_param_comms" or n.startswith(("nccl:", "c10d::"))
                 or _NCCL_API.match(n))
    scope_row = linking.nearest_ancestor(parent, launch_idx, scope, include_self=False)
    _classify(device, scope_row, comm_meta, comm_rules)
    _clip_same_stream(device, meta)
    collectives, shared = collective_rows(device, host, comm_meta, parent)
    meta.warnings.add("nsys-nccl-range-several-kernels", "comm kernels launched by one NCCL call or group with "
                      "several kernels: its size cannot be split between them, so they have none", shared)
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


def _columns(rows) -> dict:
    """A table as a dict of columns: numpy arrays, Labels for categorical columns."""
    items = rows.items() if hasattr(rows, "items") else rows
    return {c: v if isinstance(v, Labels) else categorical_of(v) if categorical_of(v) is not None
            else np.asarray(v) for c, v in items}


def _gloo_flags(host: dict) -> np.ndarray:
    """``gloo`` for gloo:* collectives on a thread other than the training loop's (kineto-format.md §11)."""
    out = np.full(len(host["start_ns"]), None, dtype=object)
    is_gloo = mask(host["name"], lambda n: n.startswith("gloo:"))
    if not is_gloo.any():
        return out
    main = linking.main_thread(host)
    off_main = ~((host["pid"] == main[0]) & (host["tid"] == main[1])) if main else True
    out[is_gloo & off_main] = "gloo"
    return out


def _classify(device: dict, scope_row: np.ndarray, comm_meta: dict, comm_rules) -> None:
    n = len(device["start_ns"])
    is_comm = np.zeros(n, dtype=bool)
    comm_kind = np.full(n, None, dtype=object)
    rule = np.full(n, None, dtype=object)
    is_kernel = isin(device["kind"], ("compute",))
    is_copy = isin(device["kind"], ("memcpy",))

    has_args = np.zeros(n, dtype=bool)
    if len(comm_meta["row"]):
        on_device = (comm_meta["table"] == "device") & present(comm_meta["collective"])
        has_args[comm_meta["row"][on_device]] = True
    has_args &= is_kernel
    names = device["name"]
    name_kind, name_rule = classify.match_names(names, classify.DEFAULT_RULES + tuple(comm_rules))
    by_name = is_kernel & (name_kind != None)  # noqa: E711 (element-wise)
    by_scope = is_kernel & (scope_row >= 0)
    ce = is_copy & (mask(names, lambda n: "PtoP" in n) | device["cross_device"].astype(bool))
    # A device-to-device copy launched inside a collective's CPU scope is the collective's data movement
    # (copy-engine collectives, NCCL 2.28+): linked by correlation only, never by timing, since a copy on
    # another stream at the same time may be any tensor's. Host<->device copies there (gloo staging CUDA
    # tensors through the host) stay copies.
    ce_scope = is_copy & (scope_row >= 0) & ~ce & mask(names, lambda n: "DtoD" in n or "DeviceToDevice" in n)

    for hit, ck, r in ((ce, "ce_copy", "ce-copy"), (ce_scope, "ce_copy", "ce-copy-scope"),
                       (by_scope, "nccl", "comm-scope"),
                       (by_name, name_kind, name_rule), (has_args, "nccl", "collective-args")):
        # Applied lowest priority first so the strongest signal's label wins.
        comm_kind[hit] = ck[hit] if isinstance(ck, np.ndarray) else ck
        rule[hit] = r[hit] if isinstance(r, np.ndarray) else r
        is_comm |= hit
    # A named RCCL/NCCL family keeps its more specific label over the generic collective-args one.
    named = has_args & by_name
    comm_kind[named] = name_kind[named]
    device["kind"] = _relabel(device["kind"], is_comm, "comm")
    device["comm_kind"] = comm_kind
    device["rule"] = rule


def _relabel(col, rows: np.ndarray, value: str) -> Labels:
    """``col`` with ``rows`` set to ``value``, as a categorical over the sorted values in use (what
    :func:`categorical` of the edited strings gives), computed on the codes."""
    cat = categorical_of(col)
    if cat is None:
        cat = categorical(np.asarray(col, dtype=object))
    names = cat.categories.tolist() + [value]
    codes = np.where(rows, len(names) - 1, cat.codes.astype(np.int64))
    used = distinct(codes[codes >= 0])
    labels_ = sorted({names[c] for c in used.tolist()})
    at = {v: i for i, v in enumerate(labels_)}
    remap = np.array([at.get(v, -1) for v in names] + [-1], dtype=np.int64)
    return Labels(remap[codes], labels_)


def _clip_same_stream(device: dict, meta: RunMeta) -> None:
    """Cut an activity's end at the next one's start on the same stream (ROCm overruns), and count it."""
    rows = np.flatnonzero(~isin(device["kind"], ("sync",)))
    if rows.size < 2:
        return
    dev, stream = device["device"][rows], device["stream"][rows]
    start, end = device["start_ns"][rows], device["end_ns"][rows]
    order = np.lexsort((start, stream, dev))
    rows, dev, stream, start, end = rows[order], dev[order], stream[order], start[order], end[order]
    same_lane = (dev[:-1] == dev[1:]) & (stream[:-1] == stream[1:])
    over = same_lane & (end[:-1] > start[1:])
    if not over.any():
        return
    clipped = device["end_ns"].copy()
    clipped[rows[:-1][over]] = start[1:][over]
    device["end_ns"] = clipped
    meta.warnings.add("same-stream-overlap", "activities overran the next one on the same stream and were clipped",
                      int(over.sum()))


def _typed(table, columns: dict[str, str]) -> Table:
    """Exactly the contract's columns, in order, with the contract's dtypes (-1 for missing ints).

    ``table``: a Table or a dict of columns. Columns that already have the contract's type are used as
    they are; only the others are converted.
    """
    cols = _columns(table)
    n = len(next(iter(cols.values()))) if cols else 0
    out = {}
    for c, t in columns.items():
        v = cols.get(c)
        if v is None:
            out[c] = np.full(n, -1, dtype=np.int64) if t == "int64" else Labels(np.full(n, -1), []) \
                if t == "category" else np.full(n, None, dtype=object)
        elif t == "int64":
            out[c] = v if v.dtype == np.int64 else _int64(v)
        elif t == "category":
            out[c] = v if isinstance(v, Labels) else categorical(objects(v))
        else:
            out[c] = objects(v)
    return Table(out)


def _int64(values: np.ndarray) -> np.ndarray:
    """Numbers as int64, -1 where a value is missing or not a number (floats truncated toward zero)."""
    if values.dtype.kind in "iub":
        return values.astype(np.int64)
    if values.dtype.kind == "f":
        ok = np.isfinite(values) & (np.abs(values) < 2.0**63)
        return np.where(ok, np.where(ok, values, 0).astype(np.int64), -1)

    def one(v) -> int:
        try:
            f = float(v)
        except (TypeError, ValueError):
            return -1
        if isinstance(v, int):
            return int(v) if -2**63 <= v < 2**63 else -1
        return int(f) if f == f and abs(f) < 2.0**63 else -1
    return np.fromiter(map(one, values.tolist()), np.int64, len(values))
