"""Kineto traces, stage 3 of 4: decoded events -> plain columns.

Categories normalised across eras (legacy names, GPU lanes by category), times to int64 epoch ns (exactly,
through Decimal for the 2024 nightlies' absolute float µs), ids to int64 (string tids such as ``"stream
7"``), names factorised, collective metadata from kernel and CPU-op args, thread names and run metadata.
Times become int64 nanoseconds here and nowhere else. The product, :class:`KinetoColumns`, is numpy arrays
and short lists: it pickles cheaply from a decode worker, and :mod:`.build` turns it into a RankTrace.
Column by column, never event by event where a C call can do it: a trace has 10^5 events.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal
from itertools import repeat
from operator import add, attrgetter
from pathlib import Path
from typing import Union

import msgspec
import numpy as np

from ...model.annotation import CATEGORY as ADDED_CATEGORY
from ...model.meta import MAX_WORLD, RunMeta, rank_in_file_name
from .schema import Document, Event, TimesDoc, TimesOnly

_LEGACY_CAT = {"operator": "cpu_op", "user": "user_annotation", "runtime": "cuda_runtime", "kernel": "kernel",
               "memcpy": "gpu_memcpy", "memset": "gpu_memset", "gpu_user_annotation": "gpu_user_annotation"}
DEVICE_CATS = {"kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync"}
HOST_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime",
             "python_function"}   # with_stack frames: they name the Python line behind a sync
# The complete events ``tracelens annotate`` added are of neither (their category, ADDED_CATEGORY): no row is
# made of them (tests/integration/test_annotate.py reads an annotated trace back).
_ADDED = msgspec.json.encode(ADDED_CATEGORY)        # the category as written, for the metadata events
_STREAM_IN_TID = re.compile(r"(\d+)")
_F53 = float(2**43)  # below this a float µs value still resolves single nanoseconds (ulp < 1 ns)


def _times_ns(values: list, force: bool = False) -> np.ndarray | None:
    """µs values (int or 3-decimal float) -> int64 ns, exactly; None when only a Decimal re-read can be exact.

    Integers scale exactly. For floats below 2**43 µs the float's error is under half a nanosecond, so
    splitting off the integer part and rounding the fraction recovers the written decimals exactly.
    Larger floats (absolute epoch µs with decimals, 2024 nightlies) return None unless ``force``.
    """
    arr = np.array(values)
    if arr.dtype.kind in "iu" or arr.size == 0:
        return arr.astype(np.int64) * 1000
    arr = arr.astype(np.float64)
    whole = np.floor(arr)
    frac = arr - whole
    if not force and (np.abs(arr) >= _F53).any() and frac.any():
        return None
    return whole.astype(np.int64) * 1000 + np.rint(frac * 1000).astype(np.int64)


def _decimal_ns(values: list) -> np.ndarray:
    return np.fromiter((int(d.scaleb(3)) if d is not None else 0 for d in values), np.int64, len(values))


def _to_int(values, default: int = -1) -> np.ndarray:
    """Ints, numeric strings or None -> int64 (default for anything else)."""
    out = np.empty(len(values), dtype=np.int64)
    for i, v in enumerate(values):
        if isinstance(v, bool) or v is None:
            out[i] = default
        elif isinstance(v, int):
            out[i] = v
        elif isinstance(v, float):
            out[i] = int(v)
        else:
            m = _STREAM_IN_TID.search(str(v))
            out[i] = int(m.group(1)) if m else default
    return out


def _ints(values: list, default: int = -1) -> np.ndarray:
    """Like :func:`_to_int`, in one C call for the common all-numeric column."""
    try:
        return np.fromiter(values, np.int64, len(values))
    except (TypeError, ValueError, OverflowError):
        return _to_int(values, default)


def _int_field(objs: list, field: str) -> np.ndarray:
    """An attribute of every struct as int64 (see :func:`_to_int`), without an intermediate list when all
    values are plain numbers."""
    get = attrgetter(field)
    try:
        return np.fromiter(map(get, objs), np.int64, len(objs))
    except (TypeError, ValueError, OverflowError):
        return _to_int(list(map(get, objs)))


_get_args, _get_cat, _get_ts, _get_dur = (attrgetter(a) for a in ("args", "cat", "ts", "dur"))
_get_name = attrgetter("name")
_get_grid, _get_block, _get_dims = (attrgetter(a) for a in ("grid", "block", "input_dims"))


@dataclass
class DecodedLabels:
    """A categorical column before pandas: ``codes`` index ``categories``; -1 is a missing value."""
    codes: np.ndarray
    categories: list


@dataclass
class KinetoColumns:
    """One Kineto file decoded into plain columns, ready for :func:`.build.build`.

    ``device`` and ``host`` map column names to int64/bool arrays or :class:`DecodedLabels`; ``threads`` holds
    pid, tid and name; ``comm_meta`` is the collective metadata found in kernel and CPU-op args, as
    columns named like ``assemble.COMM_META_COLUMNS``.
    """
    meta: RunMeta
    device: dict
    host: dict
    threads: dict
    comm_meta: dict


def labels(values: list) -> DecodedLabels:
    """Factorise names (a trace repeats a few thousand over 10^5 events): first-seen order, None missing,
    non-strings as their str."""
    index = dict.fromkeys(values)
    if any(k is not None and type(k) is not str for k in index):
        values = [v if v is None or type(v) is str else str(v) for v in values]
        index = dict.fromkeys(values)
    index.pop(None, None)
    for code, key in enumerate(index):
        index[key] = code
    codes = np.fromiter(map(index.get, values, repeat(-1)), np.int64, len(values))
    return DecodedLabels(codes, list(index))


def subset_labels(codes: np.ndarray, categories: list) -> DecodedLabels:
    """The rows' codes renumbered over the categories they use (in category order)."""
    used, inverse = np.unique(codes, return_inverse=True)
    return DecodedLabels(inverse.astype(np.int64).reshape(-1), [categories[i] for i in used.tolist()])




def event_categories(xs: list) -> tuple[np.ndarray, list, np.ndarray, np.ndarray]:
    """Each complete event's normalised category, as codes into category names, and which events are
    device activities and which host events."""
    # Categories are few: normalise the distinct values once, then index by code.
    cat = labels(list(map(_get_cat, xs)))
    norm = [_LEGACY_CAT.get(c.lower(), c.lower()) for c in cat.categories] + [""]  # code -1 (None) -> ""
    cat_names, remap = np.unique(np.array(norm, dtype=object), return_inverse=True)
    codes = remap.reshape(-1)[cat.codes]
    cat_names = cat_names.tolist()
    dev_mask = np.isin(np.array(cat_names, dtype=object), list(DEVICE_CATS))[codes]
    host_mask = np.isin(np.array(cat_names, dtype=object), list(HOST_CATS))[codes]
    return codes, cat_names, dev_mask, host_mask


def event_times(source, events: list, xs: list, meta: RunMeta) -> tuple[np.ndarray, np.ndarray]:
    """(ts, dur) of the complete events in int64 ns, before the base time is added. ``source``: the file's
    JSON, or the JSON text of each event kept (files decoded event by event)."""
    ts = list(map(_get_ts, xs))
    start = _times_ns(ts)
    if start is not None:
        return start, _times_ns(list(map(_get_dur, xs)), force=True)
    # Absolute float µs with decimals: re-read the written digits exactly, once per file.
    exact = _exact_times(source, len(events))
    if exact is None:
        meta.warnings.add("timestamps-rounded", "absolute float timestamps could not be re-read exactly; "
                          "sub-microsecond digits may be rounded", 1)
        return _times_ns(ts, force=True), _times_ns(list(map(_get_dur, xs)), force=True)
    sel = [exact[i] for i, e in enumerate(events) if e.__class__ is Event]
    return _decimal_ns([t.ts for t in sel]), _decimal_ns([t.dur for t in sel])


def _exact_times(source, n: int) -> list | None:
    """Re-decode only ts/dur as Decimal (the 2024 absolute-float era); None if events do not line up."""
    if isinstance(source, list):     # the events kept, as their JSON text
        source = b"[" + b",".join(source) + b"]"
    try:
        doc = msgspec.json.decode(source, type=Union[TimesDoc, list[TimesOnly]])
    except msgspec.ValidationError:
        # A ts or dur of the wrong type on an event whose kind does not read it (a flow or metadata event):
        # read every one as written, and only the complete events' (numbers, or repaired) are used.
        doc = msgspec.json.decode(source, type=Union[_RawTimesDoc, list[_RawTimes]])
        doc = [TimesOnly(_decimal_or_none(t.ts), _decimal_or_none(t.dur))
               for t in (doc if isinstance(doc, list) else doc.traceEvents)]
    times = doc if isinstance(doc, list) else doc.traceEvents
    return times if len(times) == n else None


class _RawTimes(msgspec.Struct, gc=False):
    ts: msgspec.Raw = msgspec.Raw()
    dur: msgspec.Raw = msgspec.Raw()


class _RawTimesDoc(msgspec.Struct, gc=False):
    traceEvents: list[_RawTimes] = []


def _decimal_or_none(raw: msgspec.Raw):
    try:
        return Decimal(bytes(raw).decode())
    except (ArithmeticError, ValueError):
        return None


def _dims_nelems(raw: msgspec.Raw) -> int:
    """Elements of the first tensor in ``Input Dims`` ([[65536, 384], ...] or a TensorList [[[n], [m]]])."""
    if not raw:
        return -1
    try:
        dims = msgspec.json.decode(raw)
    # Nested past the decoder's limit, or bytes the typed pass let through that are no UTF-8: no shape to read.
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return -1
    if not isinstance(dims, list) or not dims or not isinstance(dims[0], list) or not dims[0]:
        return -1
    first = dims[0]
    tensors = first if isinstance(first[0], list) else [first]
    total = 0
    for shape in tensors:
        if not all(isinstance(d, int) for d in shape):
            return -1
        total += int(np.prod(shape, dtype=np.int64)) if shape else 1
    return total


def _first_type(raw: msgspec.Raw) -> str | None:
    if not raw:
        return None
    try:
        types = msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
        return None
    return types[0] if isinstance(types, list) and types and isinstance(types[0], str) and types[0] else None


def comm_meta_of(args: list, wanted: list, table: str) -> dict:
    """Collective metadata of the ``wanted`` rows of a table (``row`` indexes the table), as columns named
    like ``assemble.COMM_META_COLUMNS``. Built column by column: a long run has 10^5 such rows."""
    sub = [args[i] for i in wanted]
    n = len(sub)
    field = lambda name: list(map(attrgetter(name), sub))  # noqa: E731
    in_n = _first_given(_opt_ints(field("in_nelems")), _opt_ints(field("in_size")))
    out_n = _first_given(_opt_ints(field("out_nelems")), _opt_ints(field("out_size")))
    pg = [str(p) if p is not None else (str(i) if i is not None else None)
          for p, i in zip(field("pg_name"), field("pg_id"))]
    seq = [s if type(s) is int else int(s) if isinstance(s, str) and s.isdigit() else -1 for s in field("seq")]
    return {"table": [table] * n, "row": np.asarray(wanted, dtype=np.int64).reshape(-1),
            "collective": field("collective"), "in_nelems": in_n, "out_nelems": out_n, "dtype": field("dtype"),
            "group_size": _opt_ints(field("group_size")), "pg_name": pg, "pg_desc": field("pg_desc"),
            "seq": np.array(seq, dtype=np.int64),
            "dims_nelems": np.array(_per_distinct(field("input_dims"), _dims_nelems), dtype=np.int64),
            "input_type": _per_distinct(field("input_type"), _first_type)}


def _opt_ints(values: list) -> np.ndarray:
    """Optional numbers (None, int or float) as int64, -1 where absent."""
    try:
        return np.fromiter(values, np.int64, len(values))   # none absent: one C call
    except (TypeError, ValueError, OverflowError):
        pass
    arr = np.array(values, dtype=object)
    given = arr != None  # noqa: E711 (element-wise)
    out = np.full(len(values), -1, dtype=np.int64)
    if given.any():
        out[given] = [int(v) for v in arr[given]]
    return out


def _first_given(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(a >= 0, a, b)


def _per_distinct(raws: list, fn) -> list:
    """``fn`` of each undecoded value, computed once per distinct text (shapes and types repeat)."""
    texts = list(map(bytes, raws))
    seen = dict.fromkeys(texts)
    for text in seen:
        seen[text] = fn(msgspec.Raw(text))
    return list(map(seen.__getitem__, texts))




def comm_columns(dev_args: list, host: dict, host_args: list, meta: RunMeta | None = None) -> dict:
    """The collective metadata of the device rows whose args name a collective and of the host rows that
    carry one (``record_param_comms``, ``nccl:*``, ``gloo:*``). The members of the process groups these
    name (``Process Group Ranks``) join ``meta.pg_config`` where ``distributedInfo`` does not list them."""
    dev_comm = [i for i, a in enumerate(dev_args) if a.collective is not None]
    names = host["name"]
    carries = np.array([n == "record_param_comms" or n.startswith(("nccl:", "gloo:")) for n in names.categories]
                       + [False], dtype=bool)                     # the extra False is code -1
    host_comm = np.flatnonzero(carries[names.codes]).tolist()
    if meta is not None:
        pg_members([dev_args[i] for i in dev_comm] + [host_args[i] for i in host_comm], meta)
    return merge_comm_meta([comm_meta_of(dev_args, dev_comm, "device"), comm_meta_of(host_args, host_comm, "host")])


def pg_members(args: list, meta: RunMeta) -> None:
    """``Process Group Ranks`` ("[0, 1]", text in every trace seen; "[]" says nothing) per group name."""
    listed = {str(pg.get("pg_name")) for pg in meta.pg_config}
    seen: dict[str, bytes] = {}
    for a in args:
        name = a.pg_name if a.pg_name is not None else a.pg_id
        if name is not None and bytes(a.pg_ranks) and str(name) not in seen:
            seen[str(name)] = bytes(a.pg_ranks)
    for name, raw in seen.items():
        if name in listed:
            continue
        try:
            value = msgspec.json.decode(raw)
            if isinstance(value, str):
                value = msgspec.json.decode(value)
        except (msgspec.DecodeError, RecursionError, UnicodeDecodeError):
            continue
        if isinstance(value, list) and value and all(type(r) is int for r in value):
            meta.pg_config.append({"pg_name": name, "ranks": value})


def merge_comm_meta(parts: list[dict]) -> dict:
    """Concatenate comm-metadata column dicts (see :func:`comm_meta_of`)."""
    return {c: np.concatenate([p[c] for p in parts]) if isinstance(parts[0][c], np.ndarray)
            else [v for p in parts for v in p[c]] for c in parts[0]}


def fill_meta(doc: Document, meta: RunMeta, path: Path) -> None:
    info = doc.distributedInfo
    rank = _to_int([info.rank])[0] if info is not None and info.rank is not None else -1
    if rank >= 0:
        meta.rank, meta.rank_rule = int(rank), "distributedInfo"
    else:
        from_name = rank_in_file_name(path.name)
        if from_name is not None:
            meta.rank, meta.rank_rule = from_name, "file name"
    if info is not None:
        ws = int(_to_int([info.world_size])[0])
        meta.world_size = ws if 0 < ws <= MAX_WORLD else None
        if ws > MAX_WORLD:          # every rank up to it would be looked for
            meta.warnings.add("world-size-implausible", f"distributedInfo.world_size {ws:,} is more than {MAX_WORLD:,} "
                              "ranks (corrupt?): ignored, the run is the ranks given")
        meta.backend = info.backend
        meta.pg_config = [pg for pg in (info.pg_config or []) if isinstance(pg, dict)]
    meta.device_names = [p.name for p in (doc.deviceProperties or []) if p.name]
    meta.base_ns = doc.baseTimeNanoseconds or 0
    if doc.host_name not in (None, ""):
        meta.host = str(doc.host_name)
    for line in doc.INFO or []:
        if isinstance(line, str) and "Record counts" in line:
            dropped = sum(int(x) for x in re.findall(r"=\s*(\d+)", line))
            meta.warnings.add("profiler-dropped-records",
                              "the profiler reported out-of-range or blocklisted records it did not write",
                              dropped)


def device_columns(sub: list, kinds: DecodedLabels, start, end, ids: dict | None = None) -> tuple[dict, list]:
    args = list(map(_get_args, sub))
    dev = _int_field(args, "device")
    dev = np.where(dev == -1, _int_field(sub, "pid"), dev)
    stream = _int_field(args, "stream")
    stream = np.where(stream == -1, _int_field(sub, "tid"), stream)
    stream = np.where(stream == 0xFFFFFFFF, -1, stream)
    columns = {
        "device": dev,
        "stream": stream,
        "kind": kinds,
        "name": labels(list(map(_get_name, sub))),
        "start_ns": start,
        "end_ns": end,
        "correlation": _int_field(args, "correlation"),
        "bytes": _int_field(args, "bytes"),
        "cross_device": np.array([a.from_device is not None and a.to_device is not None
                                  and a.from_device != a.to_device for a in args], dtype=bool),
        # grid then block, each a bracketed JSON array: their concatenation is unambiguous
        "config": _raw_ids(list(map(add, map(bytes, map(_get_grid, args)), map(bytes, map(_get_block, args)))),
                           None if ids is None else ids.setdefault("config", {})),
    }
    return columns, args


def _raw_ids(texts: list, index: dict | None = None) -> np.ndarray:
    """An int64 id per distinct undecoded text (first-seen order), -1 for an absent (empty) one: equal ids,
    equal text. ``index``: the ids given so far, kept across the slices of one file (a slice numbering its
    texts afresh would give one launch configuration several ids, and the overlap tax would compare nothing)."""
    index = {b"": -1} if index is None else index
    index.setdefault(b"", -1)
    for text in texts:
        if text not in index:
            index[text] = len(index) - 1
    return np.fromiter(map(index.__getitem__, texts), np.int64, len(texts))


def host_columns(sub: list, cats: DecodedLabels, start, end, ids: dict | None = None) -> tuple[dict, list]:
    args = list(map(_get_args, sub))
    ext = _int_field(args, "external_id")
    legacy = _int_field(args, "external_id_legacy")
    columns = {
        "pid": _int_field(sub, "pid"),
        "tid": _int_field(sub, "tid"),
        "cat": cats,
        "name": labels(list(map(_get_name, sub))),
        "start_ns": start,
        "end_ns": end,
        "correlation": _int_field(args, "correlation"),
        "external_id": np.where(ext == -1, legacy, ext),
        "shapes": _raw_ids(list(map(bytes, map(_get_dims, args))),
                           None if ids is None else ids.setdefault("shapes", {})),
    }
    return columns, args


def thread_names(events: list) -> dict:
    """pid, tid, name of the named threads; a thread named twice (python, then pt_gloo_runloop) keeps the
    last name. The tracks ``tracelens annotate`` added are not the rank's threads: left out."""
    rows = [(e.pid, e.tid, e.args.name) for e in events
            if e.name == "thread_name" and isinstance(e.args.name, str) and bytes(e.cat) != _ADDED]
    last: dict[tuple[int, int], str] = {}
    if rows:
        pid, tid, name = zip(*rows)
        for key, n in zip(zip(_ints(list(pid)).tolist(), _ints(list(tid)).tolist()), name):
            last.pop(key, None)
            last[key] = n
    return {"pid": np.array([k[0] for k in last], dtype=np.int64),
            "tid": np.array([k[1] for k in last], dtype=np.int64), "name": list(last.values())}
