"""Kineto (PyTorch profiler) Chrome-trace JSON -> plain columns: the decode stage of the Kineto parser.

Decoding uses msgspec typed structs, so only the fields we need are materialised and unknown keys are
skipped inside the decoder. Every era is accepted (reference: ``kineto-format.md``): legacy category
names (PyTorch 1.9), string tids (``"stream 7"``), GPU lanes recognised by category, ``distributedInfo``
in all its shapes, integer-µs epoch timestamps, 3-decimal float µs relative to ``baseTimeNanoseconds``,
and the 2024 nightlies' absolute 3-decimal float µs (decoded exactly through Decimal, see
:func:`.kineto_columns._times_ns`). Times become int64 epoch nanoseconds in the decode and nowhere else.

The decode is split by stage, so that each part can be read (and timed) alone: :mod:`.kineto_read` reads
and gunzips the file, :mod:`.kineto_schema` is the typed document, :mod:`.kineto_repair` reads a file with
values of the wrong type event by event, :mod:`.kineto_columns` turns the events into columns, and this
module runs them in order (:func:`decode_file`; :func:`decode`, the whole-file decode). :mod:`.kineto`,
stage 4, builds the RankTrace. Names with a leading underscore are shared by these modules only; every
name other code uses is importable from here.

None of these modules imports pandas or the rest of the model: they run in decode worker processes that
start before the main process has finished importing pandas (:mod:`.workers`), and their product,
:class:`KinetoColumns`, is numpy arrays and short lists that pickle cheaply.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np

from ..errors import InputError
from ..meta import RunMeta
from .kineto_columns import (DEVICE_CATS, HOST_CATS, KinetoColumns, Labels, _categories, _comm_columns,
                             _device_columns, _event_times, _fill_meta, _host_columns, _subset, _thread_names,
                             labels)
from .kineto_read import read_bytes
from .kineto_repair import DecodeIssues, _decode_per_event
from .kineto_schema import _DECODER, KNOWN_PHASES, AnyEvent, Args, Document, Event, MetaEvent

__all__ = ["DEVICE_CATS", "HOST_CATS", "KNOWN_PHASES", "AnyEvent", "Args", "DecodeIssues", "Document", "Event",
           "KinetoColumns", "Labels", "MetaEvent", "decode", "decode_file", "labels", "read_bytes"]


def decode(raw: bytes, path: str, issues: DecodeIssues | None = None) -> tuple[Document, list | None]:
    """The typed document, and None; or, when some value does not have its expected type, the document
    read event by event and the JSON text of every event kept (for the exact re-read of timestamps).

    The whole file is decoded typed in one call (the common, clean case). Only when that fails is it
    split into raw events (:mod:`.kineto_repair`), which are decoded typed again in chunks; a chunk that
    fails is decoded event by event, and only the failing events are repaired or skipped. So one bad
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


def decode_file(path: Path, keep_alive: list | None = None) -> KinetoColumns:
    """Read, gunzip and decode one Kineto trace into columns; raises InputError for unreadable input.

    ``keep_alive``: a list that receives the decoded events instead of letting them be freed here. A
    worker process that ends right after answering passes one: freeing 10^5 objects costs ~30 ms on a
    54 MB trace, and the exit reclaims them at no cost (:func:`tracelens._speed.exit_without_teardown`).
    """
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
    codes, cat_names, dev_mask, host_mask = _categories(xs)

    # The file's text is needed only for an exact re-read of the times: freed before the columns.
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
    return KinetoColumns(meta, device, host, threads, _comm_columns(dev_args, host, host_args, meta))
