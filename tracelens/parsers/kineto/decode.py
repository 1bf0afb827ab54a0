"""Kineto (PyTorch profiler) Chrome-trace JSON -> plain columns: the decode stage of the Kineto parser.

Decoding uses msgspec typed structs, so only the fields we need are materialised and unknown keys are
skipped inside the decoder. Every era is accepted (reference: ``kineto-format.md``): legacy category
names (PyTorch 1.9), string tids (``"stream 7"``), GPU lanes recognised by category, ``distributedInfo``
in all its shapes, integer-µs epoch timestamps, 3-decimal float µs relative to ``baseTimeNanoseconds``,
and the 2024 nightlies' absolute 3-decimal float µs (decoded exactly through Decimal, see
:func:`.event_columns._times_ns`). Times become int64 epoch nanoseconds in the decode and nowhere else.

The decode is split by stage, so that each part can be read (and timed) alone: :mod:`.inflate` reads
and gunzips the file, :mod:`.schema` is the typed document, :mod:`.repair` reads a file with
values of the wrong type event by event, :mod:`.event_columns` turns the events into columns, and this
module runs them in order (:func:`decode_file`; :func:`decode`, the whole-file decode). :mod:`.build`,
stage 4, builds the RankTrace. Names with a leading underscore are private to their module; what other code
uses is the package's (:mod:`tracelens.parsers.kineto`).

None of these modules imports pandas or the rest of the model: they run in decode worker processes that
start before the main process has finished importing pandas (:mod:`..workers`), and their product,
:class:`KinetoColumns`, is numpy arrays and short lists that pickle cheaply.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
import numpy as np

from ...errors import EMPTY_FILE, InputError
from ...model.meta import RunMeta
from .event_columns import (DEVICE_CATS, DecodedLabels, KinetoColumns, comm_columns, device_columns,
                            event_categories, event_times, fill_meta, host_columns, subset_labels, thread_names)
from . import slices
from .inflate import read_bytes
from ...json_text import UNREADABLE, blank, not_utf8
from .repair import DecodeIssues, decode_per_event
from .schema import DECODER, Document, Event, MetaEvent


def decode(raw: bytes, path: str, issues: DecodeIssues | None = None) -> tuple[Document, list | None]:
    """See :func:`_decode`; JSON nested past the decoder's limit is an InputError at any stage of it."""
    try:
        return _decode(raw, path, issues)
    except RecursionError:
        raise InputError(f"JSON nested deeper than the decoder's limit (~{sys.getrecursionlimit()} levels); "
                         "no profiler writes that", path=path) from None


def _decode(raw: bytes, path: str, issues: DecodeIssues | None = None) -> tuple[Document, list | None]:
    """The typed document, and None; or, when some value does not have its expected type, the document
    read event by event and the JSON text of every event kept (for the exact re-read of timestamps).

    The whole file is decoded typed in one call (the common, clean case). Only when that fails is it
    split into raw events (:mod:`.repair`), which are decoded typed again in chunks; a chunk that
    fails is decoded event by event, and only the failing events are repaired or skipped. So one bad
    event costs only itself: every other event is decoded exactly as in a clean file. Text that is not
    UTF-8 is read again with each bad sequence replaced (:func:`_valid_utf8`).
    """
    issues = issues if issues is not None else DecodeIssues()
    try:
        doc, kept = _typed(raw, path, issues)
    except UNREADABLE as exc:
        if blank(raw):
            raise InputError(EMPTY_FILE, path=path) from None
        if not not_utf8(exc, raw):
            raise InputError(f"not valid JSON ({exc})", path=path) from None
        try:
            doc, kept = _typed(_valid_utf8(raw, issues), path, issues.restart())
        except UNREADABLE as again:
            raise InputError(f"not valid JSON ({again})", path=path) from None
    if isinstance(doc, list):
        doc = Document(traceEvents=doc)
    if doc.traceEvents is None:
        raise InputError("not a PyTorch profiler trace (no 'traceEvents' list)", path=path)
    return doc, kept


def _typed(raw: bytes, path: str, issues: DecodeIssues) -> tuple:
    try:
        return DECODER.decode(raw), None
    except msgspec.ValidationError:
        return decode_per_event(raw, path, issues)


def _valid_utf8(raw: bytes, issues: DecodeIssues) -> bytes:
    """Text that is not UTF-8 (a name cut mid-character, latin-1) with each invalid sequence replaced by
    U+FFFD, counted. Only such a file pays for this second pass."""
    text = raw.decode("utf-8", "replace")
    issues.bad_utf8 = text.count("\ufffd") - raw.count("\ufffd".encode())
    return text.encode()


def decode_file(path: Path, keep_alive: list | None = None) -> KinetoColumns:
    """Read, gunzip and decode one Kineto trace into columns; raises InputError for unreadable input.

    ``keep_alive``: a list that receives the decoded events instead of letting them be freed here. A
    worker process that ends right after answering passes one: freeing every decoded object is work its
    exit does at no cost (:func:`tracelens._speed.exit_without_teardown`).
    """
    raw = slices.big_source(path) or read_bytes(path)
    meta = RunMeta(source=str(path), format="kineto", bytes=path.stat().st_size)
    if len(raw) > slices.SLICE_BYTES:
        holder = [raw]
        del raw
        cols = slices.decode(holder, path, meta, epoch_times)
        if cols is not None:
            return cols
        raw = read_bytes(path)          # not clean: the whole-file decode repairs or says what is wrong
        meta = RunMeta(source=str(path), format="kineto", bytes=path.stat().st_size)
    issues = DecodeIssues()
    doc, kept = decode(raw, str(path), issues)
    events = doc.traceEvents
    if not events and issues.skipped:
        raise InputError("no event of the trace could be read (wrong type or missing: "
                         + ", ".join(issues.skipped) + ")", path=str(path))
    if not events:
        raise InputError("the trace has no events ('traceEvents' is empty)", path=str(path))
    fill_meta(doc, meta, path)
    issues.to_warnings(meta.warnings)
    xs = [e for e in events if e.__class__ is Event]
    threads = thread_names([e for e in events if e.__class__ is MetaEvent])
    codes, cat_names, dev_mask, host_mask = event_categories(xs)

    # The file's text is needed only for an exact re-read of the times: freed before the columns.
    start, dur = event_times(raw if kept is None else kept, events, xs, meta)
    del raw, kept
    start, end, outside = epoch_times(start, dur, doc.baseTimeNanoseconds or 0)
    if outside.any():
        used = dev_mask | host_mask
        n_out = int((used & outside).sum())
        if n_out and n_out == int(used.sum()):
            raise InputError("every event's time is outside the int64 nanosecond range since the epoch "
                             "(ts, dur or baseTimeNanoseconds too large, or negative)", path=str(path))
        meta.warnings.add("out-of-range-times", "skipped events whose start or end, in ns since the epoch, "
                          "is negative or does not fit int64 (a huge ts, dur or baseTimeNanoseconds)", n_out)
        dev_mask, host_mask = dev_mask & ~outside, host_mask & ~outside
    meta.warnings.add("negative-duration", "events with a negative duration were clamped to 0",
                      int(((dev_mask | host_mask) & (dur < 0)).sum()))

    dev_rows, host_rows = np.flatnonzero(dev_mask), np.flatnonzero(host_mask)
    if not dev_rows.size and not host_rows.size:
        raise InputError("the trace has no device activity, CPU op or runtime call to report on (of its "
                         f"{len(events)} events, none is a complete event of a known category)", path=str(path))
    dev_events = [xs[i] for i in dev_rows.tolist()]
    host_events = [xs[i] for i in host_rows.tolist()]
    if keep_alive is not None:
        keep_alive.append(doc)
    del xs, events, doc
    dev_cats = subset_labels(codes[dev_rows], cat_names)
    kinds = DecodedLabels(dev_cats.codes, [DEVICE_CATS[c] for c in dev_cats.categories])
    device, dev_args = device_columns(dev_events, kinds, start[dev_rows], end[dev_rows])
    host, host_args = host_columns(host_events, subset_labels(codes[host_rows], cat_names), start[host_rows],
                                   end[host_rows])
    return KinetoColumns(meta, device, host, threads, comm_columns(dev_args, host, host_args, meta))


_I64_MAX, _I64_MIN = np.iinfo(np.int64).max, np.iinfo(np.int64).min


def epoch_times(start: np.ndarray, dur: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(start, end, outside): epoch ns start and end (negative durations clamped to 0), and which events'
    start is before the epoch or whose start or end would wrap int64 (their times are left meaningless;
    the caller skips them).

    The schema bounds ts and dur to 2**53 µs each, so each fits int64 ns alone; their sum, or a base near
    2**63, need not. Checked before adding, so nothing wraps."""
    dur = np.maximum(dur, 0)
    outside = (start > _I64_MAX - base) if base >= 0 else (start < _I64_MIN - base)
    start = np.where(outside, 0, start) + base if outside.any() else start + base
    outside |= start < 0        # before 1970: a wrapped or corrupt time (and -1 reads as "none" downstream)
    start = np.maximum(start, 0)
    late = dur > _I64_MAX - start
    if late.any():
        outside |= late
        dur = np.where(late, 0, dur)
    return start, start + dur, outside
