"""Kineto (PyTorch profiler) Chrome-trace JSON -> plain columns (the decode stage of the Kineto parser).

Decoding uses msgspec typed structs, so only the fields we need are materialised and unknown keys are
skipped inside the decoder. Every era is accepted (reference: ``kineto-format.md``): legacy category
names (PyTorch 1.9), string tids (``"stream 7"``), GPU lanes recognised by category, ``distributedInfo``
in all its shapes, integer-µs epoch timestamps, 3-decimal float µs relative to ``baseTimeNanoseconds``,
and the 2024 nightlies' absolute 3-decimal float µs (decoded exactly through Decimal, see
:func:`_times_ns`). Times become int64 epoch nanoseconds here and nowhere else.

This module imports neither pandas nor the rest of the model: it runs in decode worker processes that
start before the main process has finished importing pandas (:mod:`.workers`), and its product,
:class:`KinetoColumns`, is numpy arrays and short lists that pickle cheaply. :mod:`.kineto` turns it into
a RankTrace.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from decimal import Decimal
from itertools import repeat
from operator import attrgetter
from pathlib import Path
from typing import Annotated, Union

import msgspec
import numpy as np

try:  # ISA-L inflate: 2.3x faster than zlib on a 54 MB trace (bench/RESULTS.md); same checks and errors.
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - platforms without an isal wheel
    _inflate = zlib

from ..errors import InputError
from ..meta import RunMeta, rank_in_file_name
from .gcpause import no_cyclic_gc

# Bounded so that a value no int64 column can hold fails in the decoder (and is handled per event, see
# decode) instead of overflowing later; the bounds cost nothing measurable in the typed pass.
Int64 = Annotated[int, msgspec.Meta(ge=-2**63, le=2**63 - 1)]
Float64 = Annotated[float, msgspec.Meta(ge=-2.0**63, lt=2.0**63)]
Num = Union[Int64, Float64, None]
IntOrStr = Union[Int64, str, None]
# Times in µs: within ±2**53 µs, times 1000, they still fit int64 ns.
Time = Union[Annotated[int, msgspec.Meta(ge=-2**53, le=2**53)], Annotated[float, msgspec.Meta(ge=-2.0**53, le=2.0**53)]]


_NO_RAW = msgspec.Raw()


class Args(msgspec.Struct, frozen=True, gc=False):
    """The ``args`` keys tracelens reads; every other key is skipped inside the decoder.

    Id-like fields default to -1 (the model's "none") so whole columns convert to int64 in one call.
    """
    correlation: IntOrStr = -1
    external_id: IntOrStr = msgspec.field(default=-1, name="External id")
    external_id_legacy: IntOrStr = msgspec.field(default=-1, name="external id")
    device: IntOrStr = -1
    stream: IntOrStr = -1
    bytes: Num = -1
    from_device: IntOrStr = msgspec.field(default=None, name="fromDevice")
    to_device: IntOrStr = msgspec.field(default=None, name="toDevice")
    name: Union[str, int, None] = None          # metadata events (thread_name, process_name)
    labels: Union[str, None] = None             # process_labels
    collective: Union[str, None] = msgspec.field(default=None, name="Collective name")
    in_nelems: Num = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Num = msgspec.field(default=None, name="Out msg nelems")
    in_size: Num = msgspec.field(default=None, name="In msg size")
    out_size: Num = msgspec.field(default=None, name="Out msg size")
    dtype: Union[str, None] = None
    group_size: Num = msgspec.field(default=None, name="Group size")
    pg_name: IntOrStr = msgspec.field(default=None, name="Process Group Name")
    pg_id: IntOrStr = msgspec.field(default=None, name="Process Group ID")
    pg_desc: Union[str, None] = msgspec.field(default=None, name="Process Group Description")
    seq: IntOrStr = msgspec.field(default=None, name="Seq")
    # Kept undecoded (Raw cannot be in a Union; an empty Raw means absent) and read only for comm scopes.
    input_dims: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input Dims")
    input_type: msgspec.Raw = msgspec.field(default=_NO_RAW, name="Input type")


_NO_ARGS = Args()


class Event(msgspec.Struct, tag_field="ph", tag="X", gc=False):
    """A complete event (``"ph": "X"``): every CPU op, runtime call and device activity.

    ``ts`` and ``dur`` are required numbers: an event without its time cannot be placed, and reading a
    missing one as 0 would put it at the epoch (it is skipped and counted instead, see :func:`decode`).
    """
    ts: Time
    dur: Time
    cat: Union[str, None] = None
    name: Union[str, int, float, None] = None
    pid: IntOrStr = None
    tid: IntOrStr = None
    args: Args = _NO_ARGS


class MetaEvent(msgspec.Struct, tag_field="ph", tag="M", gc=False):
    """Metadata (``"ph": "M"``): thread and process names."""
    name: Union[str, int, float, None] = None
    pid: IntOrStr = None
    tid: IntOrStr = None
    args: Args = _NO_ARGS


# Every other Chrome-trace phase (flows, instants, counters, async, ...) decodes to an empty struct: a
# third of a Kineto trace is ac2g flow and instant events, and none of their fields are needed.
_SKIPPED_PHASES = tuple("BEiICbnestfPONDVvRc()")
_Skipped = tuple(msgspec.defstruct(f"Skipped_{ord(p)}", [], tag_field="ph", tag=p, gc=False)
                 for p in _SKIPPED_PHASES)
AnyEvent = Union[(Event, MetaEvent) + _Skipped]
KNOWN_PHASES = frozenset(("X", "M") + _SKIPPED_PHASES)


class DistInfo(msgspec.Struct, gc=False):
    rank: IntOrStr = None
    world_size: IntOrStr = None
    backend: Union[str, None] = None
    nccl_version: Union[str, None] = None
    pg_config: Union[list, None] = None


class DeviceProp(msgspec.Struct, gc=False):
    id: IntOrStr = None
    name: Union[str, None] = None


class Document(msgspec.Struct, gc=False):
    traceEvents: Union[list[AnyEvent], None] = None
    distributedInfo: Union[DistInfo, None] = None
    deviceProperties: Union[list[DeviceProp], None] = None
    baseTimeNanoseconds: Union[Int64, None] = None
    INFO: Union[list, None] = None


_DECODER = msgspec.json.Decoder(Union[Document, list[AnyEvent]])


class _TimesOnly(msgspec.Struct, gc=False):
    ts: Union[Decimal, None] = None
    dur: Union[Decimal, None] = None


class _TimesDoc(msgspec.Struct, gc=False):
    traceEvents: list[_TimesOnly] = []


_LEGACY_CAT = {"operator": "cpu_op", "user": "user_annotation", "runtime": "cuda_runtime", "kernel": "kernel",
               "memcpy": "gpu_memcpy", "memset": "gpu_memset", "gpu_user_annotation": "gpu_user_annotation"}
DEVICE_CATS = {"kernel": "compute", "gpu_memcpy": "memcpy", "gpu_memset": "memset", "cuda_sync": "sync"}
HOST_CATS = {"cpu_op", "user_annotation", "cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime",
             "python_function"}   # with_stack frames: they name the Python line behind a sync
_STREAM_IN_TID = re.compile(r"(\d+)")
_F53 = float(2**43)  # below this a float µs value still resolves single nanoseconds (ulp < 1 ns)


def read_bytes(path: Path) -> bytes:
    """File contents, gunzipped when the magic bytes say gzip (whatever the suffix)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from None
    if raw[:2] == b"\x1f\x8b":
        try:
            # gzip mode checks the CRC in C; gzip.decompress would run a second crc32 pass.
            inflater = _inflate.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = inflater.decompress(raw)
            if not inflater.eof:
                raise EOFError("compressed data ended before the end-of-stream marker")
            raw = out
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InputError(f"truncated or corrupt gzip data ({exc})", path=str(path)) from None
    return raw


def decode(raw: bytes, path: str, issues: DecodeIssues | None = None) -> tuple[Document, list | None]:
    """The typed document, and None; or, when some value does not have its expected type, the document
    read event by event and the JSON text of every event kept (for the exact re-read of timestamps).

    The whole file is decoded typed in one call (the common, clean case). Only when that fails is it
    split into raw events, which are decoded typed again in chunks; a chunk that fails is decoded event
    by event, and only the failing events are repaired (:func:`_decode_repaired`) or skipped. So one bad
    event costs only itself: every other event is decoded exactly as in a clean file.
    """
    try:
        doc = _DECODER.decode(raw)
        kept = None
    except msgspec.ValidationError:
        doc, kept = _decode_per_event(raw, path, issues if issues is not None else DecodeIssues())
    except msgspec.DecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    if isinstance(doc, list):
        doc = Document(traceEvents=doc)
    if doc.traceEvents is None:
        raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", path=path)
    return doc, kept


class DecodeIssues:
    """Values repaired and events skipped while decoding one file, per field (a dotted path such as
    ``args.bytes``), each with its count and the index in ``traceEvents`` of its first event."""

    def __init__(self) -> None:
        self.skipped: dict[str, list[int]] = {}     # field -> [events, first index]
        self.coerced: dict[str, list[int]] = {}     # field -> [values, first index]
        self.header: list[str] = []                 # document-level fields ignored

    @staticmethod
    def _note(table: dict, field: str, index: int) -> None:
        entry = table.get(field)
        if entry is None:
            table[field] = [1, index]
        else:
            entry[0] += 1

    def to_warnings(self, log) -> None:
        def fields(table):
            return ", ".join(f"{f} ({n}, first traceEvents[{i}])" if i >= 0 else f"{f} ({n})"
                             for f, (n, i) in table.items())
        if self.skipped:
            n = sum(c for c, _ in self.skipped.values())
            log.add("malformed-events", f"skipped {n} event{'s' if n > 1 else ''} with a field of the wrong type "
                    f"or missing: {fields(self.skipped)}", n)
        if self.coerced:
            n = sum(c for c, _ in self.coerced.values())
            log.add("coerced-values", f"read {n} value{'s' if n > 1 else ''} written with another type (a number "
                    f"as text, a whole number as a float): {fields(self.coerced)}", n)
        if self.header:
            log.add("malformed-header", "ignored document fields of the wrong type: " + ", ".join(self.header),
                    len(self.header))


class _RawDocument(msgspec.Struct, gc=False):
    """The document with every field we read left undecoded (the per-event path, see :func:`decode`)."""
    traceEvents: msgspec.Raw = _NO_RAW
    distributedInfo: msgspec.Raw = _NO_RAW
    deviceProperties: msgspec.Raw = _NO_RAW
    baseTimeNanoseconds: msgspec.Raw = _NO_RAW
    INFO: msgspec.Raw = _NO_RAW


_RAW_DOC = msgspec.json.Decoder(Union[_RawDocument, list[msgspec.Raw]])
_RAW_LIST = msgspec.json.Decoder(list[msgspec.Raw])
_EVENTS = msgspec.json.Decoder(list[AnyEvent])
_EVENT = msgspec.json.Decoder(AnyEvent)
_HEADER = {"distributedInfo": msgspec.json.Decoder(Union[DistInfo, None]),
           "deviceProperties": msgspec.json.Decoder(Union[list[DeviceProp], None]),
           "baseTimeNanoseconds": msgspec.json.Decoder(Union[Int64, None]),
           "INFO": msgspec.json.Decoder(Union[list, None])}
# Floats stay their written text (a Raw), so an event re-encoded after a repair keeps every digit.
_UNTYPED = msgspec.json.Decoder(float_hook=lambda text: msgspec.Raw(text.encode()))
_CHUNK = 2048            # events decoded per typed call on the per-event path
_ERROR_AT = re.compile(r" - at `\$(.*)`$")
_PATH_PART = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]")
_MISSING = re.compile(r"missing required field `([^`]+)`")
_NUMBER_TEXT = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_INT64 = Decimal(2**63)


def _decode_per_event(raw: bytes, path: str, issues: DecodeIssues) -> tuple[Document, list]:
    try:
        top = _RAW_DOC.decode(raw)
    except msgspec.ValidationError:
        raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", path=path) from None
    except msgspec.DecodeError as exc:
        raise InputError(f"not valid JSON ({exc})", path=path) from None
    doc = Document()
    if isinstance(top, list):
        pieces = top
    else:
        if not top.traceEvents:
            return doc, []       # decode() reports the missing list
        try:
            pieces = _RAW_LIST.decode(top.traceEvents)
        except msgspec.ValidationError:
            raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", path=path) from None
        for name, decoder in _HEADER.items():
            text = getattr(top, name)
            if text:
                value = _decode_repaired(text, decoder, name, -1, issues, header=True)
                setattr(doc, name, value)
    events, kept = [], []
    for at in range(0, len(pieces), _CHUNK):
        chunk = pieces[at:at + _CHUNK]
        try:
            events += _EVENTS.decode(b"[" + b",".join(chunk) + b"]")
            kept += chunk
            continue
        except msgspec.ValidationError:
            pass
        for k, piece in enumerate(chunk):
            try:
                events.append(_EVENT.decode(piece))
                kept.append(piece)
                continue
            except msgspec.ValidationError as exc:
                error = str(exc)
            event = _decode_event(piece, error, at + k, issues)
            if event is not None:
                events.append(event[0])
                kept.append(event[1])
    doc.traceEvents = events
    return doc, kept


def _decode_event(piece, error: str, index: int, issues: DecodeIssues):
    """(event, its JSON text) for an event the typed decoder refused with ``error``, repaired where the value
    is a number of the wrong JSON type; None when it is skipped. Unknown phases are not ours to read: skipped
    quietly."""
    try:
        obj = _UNTYPED.decode(piece)
    except msgspec.ValidationError:         # a number beyond float range (1e400)
        parts, missing = _error_field(error)
        DecodeIssues._note(issues.skipped, ".".join(map(str, parts)) or "event", index)
        return None
    if not isinstance(obj, dict):
        DecodeIssues._note(issues.skipped, "event (not an object)", index)
        return None
    ph = obj.get("ph")
    if isinstance(ph, str) and ph not in KNOWN_PHASES:
        return None
    return _decode_repaired(piece, _EVENT, "", index, issues, obj=obj, with_text=True, error=error)


def _decode_repaired(piece, decoder, prefix: str, index: int, issues: DecodeIssues, header: bool = False,
                     obj=None, with_text: bool = False, error: str | None = None):
    """Decode ``piece`` typed; while the decoder names a field whose value is recoverable (a number
    written as text, a whole number written as a float), replace it by that number and try again.
    Returns the value (with its repaired JSON text when ``with_text``), or None when it cannot be read.
    ``error``: the typed decoder's message, when the caller has already tried."""
    if error is None:
        try:
            value = decoder.decode(piece)
            return (value, piece) if with_text else value
        except msgspec.ValidationError as exc:
            error = str(exc)
    if obj is None:
        try:
            obj = _UNTYPED.decode(piece)
        except msgspec.ValidationError:     # a number beyond float range
            obj = None
    repaired: list[str] = []
    while True:
        parts, missing = _error_field(error)
        field = ".".join(str(p) for p in ([prefix] if prefix else []) + parts + ([missing] if missing else []))
        holder, key = _locate(obj, parts)
        new = None if missing or holder is None or field in repaired else _recovered(holder[key])
        if new is None:
            if header:
                issues.header.append(field or prefix)
            else:
                DecodeIssues._note(issues.skipped, field or "event", index)
            return None
        holder[key] = new
        repaired.append(field)
        text = msgspec.json.encode(obj)
        try:
            value = decoder.decode(text)
        except msgspec.ValidationError as exc:
            error = str(exc)
            continue
        for f in repaired:
            DecodeIssues._note(issues.coerced, f, index)
        return (value, text) if with_text else value


def _error_field(message: str) -> tuple[list, str | None]:
    """The path (keys and list indexes) a msgspec ValidationError points at, and the name of a missing
    required field."""
    at = _ERROR_AT.search(message)
    parts = [int(i) if i else k for k, i in _PATH_PART.findall(at.group(1))] if at else []
    missing = _MISSING.search(message)
    return parts, missing.group(1) if missing else None


def _locate(obj, parts: list):
    """(container, key) of the value at ``parts`` inside ``obj``; (None, None) when the path is not there."""
    if not parts:
        return None, None
    for p in parts[:-1]:
        try:
            obj = obj[p]
        except (KeyError, IndexError, TypeError):
            return None, None
    last = parts[-1]
    if isinstance(obj, dict) and last in obj or isinstance(obj, list) and isinstance(last, int) and last < len(obj):
        return obj, last
    return None, None


def _recovered(value):
    """The number ``value`` stands for as JSON text (a Raw), or None: a finite number written as a string
    (``"123.5"``), or a float with no fraction (``7.0``, read where an integer is expected)."""
    if isinstance(value, str):
        text = value.strip()
        if _NUMBER_TEXT.fullmatch(text) and abs(Decimal(text)) < _INT64:
            return msgspec.Raw(text.encode())
        return None
    if isinstance(value, msgspec.Raw):      # a float, as written (see _UNTYPED)
        number = Decimal(bytes(value).decode())
        if number == number.to_integral_value() and abs(number) < _INT64:
            return msgspec.Raw(str(int(number)).encode())
    return None


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


@dataclass
class Labels:
    """A categorical column before pandas: ``codes`` index ``categories``; -1 is a missing value."""
    codes: np.ndarray
    categories: list


@dataclass
class KinetoColumns:
    """One Kineto file decoded into plain columns, ready for :func:`tracelens.parsers.kineto.build`.

    ``device`` and ``host`` map column names to int64/bool arrays or :class:`Labels`; ``threads`` holds
    pid, tid and name; ``comm_meta`` is the collective metadata found in kernel and CPU-op args, as
    columns named like ``assemble.COMM_META_COLUMNS``.
    """
    meta: RunMeta
    device: dict
    host: dict
    threads: dict
    comm_meta: dict


def labels(values: list) -> Labels:
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
    return Labels(codes, list(index))


def _subset(codes: np.ndarray, categories: list) -> Labels:
    """The rows' codes renumbered over the categories they use (in category order)."""
    used, inverse = np.unique(codes, return_inverse=True)
    return Labels(inverse.astype(np.int64).reshape(-1), [categories[i] for i in used.tolist()])


def decode_file(path: Path, keep_alive: list | None = None) -> KinetoColumns:
    """Read, gunzip and decode one Kineto trace into columns; raises InputError for unreadable input.

    ``keep_alive``: a list that receives the decoded events instead of letting them be freed here. A
    worker process that exits right after answering passes one: freeing 10^5 objects costs ~20 ms on a
    54 MB trace, and the exit reclaims them at no cost.
    """
    with no_cyclic_gc():
        raw = read_bytes(path)
        meta = RunMeta(source=str(path), format="kineto", bytes=path.stat().st_size)
        issues = DecodeIssues()
        doc, kept = decode(raw, str(path), issues)
        events = doc.traceEvents
        if not events and issues.skipped:
            raise InputError("no event of the trace could be read (wrong type or missing: "
                             + ", ".join(issues.skipped) + ")", path=str(path))
        if not events:
            raise InputError("the trace has no events ('traceEvents' is empty)", path=str(path))
        _fill_meta(doc, meta, path)
        issues.to_warnings(meta.warnings)
        xs = [e for e in events if e.__class__ is Event]
        threads = _thread_names([e for e in events if e.__class__ is MetaEvent])

        # Categories are few: normalise the distinct values once, then index by code.
        cat = labels(list(map(_get_cat, xs)))
        norm = [_LEGACY_CAT.get(c.lower(), c.lower()) for c in cat.categories] + [""]  # code -1 (None) -> ""
        cat_names, remap = np.unique(np.array(norm, dtype=object), return_inverse=True)
        codes = remap.reshape(-1)[cat.codes]
        cat_names = cat_names.tolist()
        dev_mask = np.isin(np.array(cat_names, dtype=object), list(DEVICE_CATS))[codes]
        host_mask = np.isin(np.array(cat_names, dtype=object), list(HOST_CATS))[codes]

        start, dur = _event_times(raw if kept is None else kept, events, xs, meta)
        del raw, kept
        start += doc.baseTimeNanoseconds or 0
        meta.warnings.add("negative-duration", "events with a negative duration were clamped to 0",
                          int(((dev_mask | host_mask) & (dur < 0)).sum()))
        end = start + np.maximum(dur, 0)

        dev_rows, host_rows = np.flatnonzero(dev_mask), np.flatnonzero(host_mask)
        dev_events = [xs[i] for i in dev_rows.tolist()]
        host_events = [xs[i] for i in host_rows.tolist()]
        if keep_alive is not None:
            keep_alive.append(doc)
        del xs, events, doc
        dev_cats = _subset(codes[dev_rows], cat_names)
        kinds = Labels(dev_cats.codes, [DEVICE_CATS[c] for c in dev_cats.categories])
        device, dev_args = _device_columns(dev_events, kinds, start[dev_rows], end[dev_rows])
        host, host_args = _host_columns(host_events, _subset(codes[host_rows], cat_names), start[host_rows],
                                        end[host_rows])
        dev_comm = [i for i, a in enumerate(dev_args) if a.collective is not None]
        names = host["name"]
        carries = np.array([n == "record_param_comms" or n.startswith(("nccl:", "gloo:")) for n in names.categories]
                           + [False], dtype=bool)                     # the extra False is code -1
        host_comm = np.flatnonzero(carries[names.codes]).tolist()
        comm_meta = _merge_comm_meta([_comm_meta(dev_args, dev_comm, "device"),
                                     _comm_meta(host_args, host_comm, "host")])
        return KinetoColumns(meta, device, host, threads, comm_meta)


def _event_times(source, events: list, xs: list, meta: RunMeta) -> tuple[np.ndarray, np.ndarray]:
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
    doc = msgspec.json.decode(source, type=Union[_TimesDoc, list[_TimesOnly]])
    times = doc if isinstance(doc, list) else doc.traceEvents
    return times if len(times) == n else None


def _dims_nelems(raw: msgspec.Raw) -> int:
    """Elements of the first tensor in ``Input Dims`` ([[65536, 384], ...] or a TensorList [[[n], [m]]])."""
    if not raw:
        return -1
    try:
        dims = msgspec.json.decode(raw)
    except msgspec.DecodeError:
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
    except msgspec.DecodeError:
        return None
    return types[0] if isinstance(types, list) and types and isinstance(types[0], str) and types[0] else None


def _comm_meta(args: list, wanted: list, table: str) -> dict:
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


def _merge_comm_meta(parts: list[dict]) -> dict:
    """Concatenate comm-metadata column dicts (see :func:`_comm_meta`)."""
    return {c: np.concatenate([p[c] for p in parts]) if isinstance(parts[0][c], np.ndarray)
            else [v for p in parts for v in p[c]] for c in parts[0]}


def _fill_meta(doc: Document, meta: RunMeta, path: Path) -> None:
    info = doc.distributedInfo
    rank = _to_int([info.rank])[0] if info is not None and info.rank is not None else -1
    if rank >= 0:
        meta.rank, meta.rank_rule = int(rank), "distributedInfo"
    else:
        from_name = rank_in_file_name(path.name)
        if from_name is not None:
            meta.rank, meta.rank_rule = from_name, "file name"
    if info is not None:
        ws = _to_int([info.world_size])[0]
        meta.world_size = int(ws) if ws > 0 else None
        meta.backend = info.backend
        meta.pg_config = [pg for pg in (info.pg_config or []) if isinstance(pg, dict)]
    meta.device_names = [p.name for p in (doc.deviceProperties or []) if p.name]
    meta.base_ns = doc.baseTimeNanoseconds or 0
    for line in doc.INFO or []:
        if isinstance(line, str) and "Record counts" in line:
            dropped = sum(int(x) for x in re.findall(r"=\s*(\d+)", line))
            meta.warnings.add("profiler-dropped-records",
                              "the profiler reported out-of-range or blocklisted records it did not write",
                              dropped)


def _device_columns(sub: list, kinds: Labels, start, end) -> tuple[dict, list]:
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
    }
    return columns, args


def _host_columns(sub: list, cats: Labels, start, end) -> tuple[dict, list]:
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
    }
    return columns, args


def _thread_names(events: list) -> dict:
    """pid, tid, name of the named threads; a thread named twice (python, then pt_gloo_runloop) keeps the
    last name."""
    rows = [(e.pid, e.tid, e.args.name) for e in events if e.name == "thread_name" and isinstance(e.args.name, str)]
    last: dict[tuple[int, int], str] = {}
    if rows:
        pid, tid, name = zip(*rows)
        for key, n in zip(zip(_ints(list(pid)).tolist(), _ints(list(tid)).tolist()), name):
            last.pop(key, None)
            last[key] = n
    return {"pid": np.array([k[0] for k in last], dtype=np.int64),
            "tid": np.array([k[1] for k in last], dtype=np.int64), "name": list(last.values())}
