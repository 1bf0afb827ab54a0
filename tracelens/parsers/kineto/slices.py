"""Kineto traces too big to decode whole: the events decoded and turned into columns a slice at a time.

The whole-file decode (:func:`.decode.decode_file`) holds the file's JSON, every decoded event
(msgspec structs, ~1.8x the JSON they come from) and then the columns: about 3x the JSON at its peak. Here
:mod:`.split` first finds, by a scan of the bytes, where slices of ``SLICE_EVENTS`` whole events begin
and end (a few dozen offsets: nothing per event is kept), and where the document's other keys are (before
or after the events: ``baseTimeNanoseconds`` is needed before the first slice). Then each slice is decoded,
turned into columns and let go before the next; the columns are joined at the end exactly as one pass would
have made them (names in first-seen order, categories sorted, the collective rows after every device row,
then the host rows). A mapped file's pages are handed back behind the scan and behind each slice, so no
more than a window and a slice of the JSON are resident at once. A gzipped one is inflated twice (once for
the scan, once for the slices) into an anonymous mapping whose pages are dropped the same way, instead of
once into memory whole.

Only a clean file takes this path: any value of the wrong type, text that is not UTF-8, JSON the scan cannot
cut, or a file that turns out to be no trace makes :func:`decode` answer None, and the whole-file decode
(with its repairs and its error messages) reads it instead.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

import msgspec
import numpy as np

from ...model.meta import RunMeta
from .event_columns import (DEVICE_CATS, DecodedLabels, KinetoColumns, comm_meta_of, device_columns,
                            event_categories, event_times, fill_meta, host_columns, merge_comm_meta, pg_members,
                            subset_labels, thread_names)
from .inflate import InflateError, Inflating, inflated_size, max_inflate
from .repair import EVENTS, HEADER, RAW_DOC
from .schema import Document, Event, MetaEvent
from . import split

SLICE_BYTES = 64 << 20        # JSON larger than this is decoded in slices (tracelens.pool.HALVES_BYTES ends here)
SLICE_EVENTS = 1 << 16


def big_source(path) -> mmap.mmap | Inflating | None:
    """A big trace's JSON, mapped rather than read: the file itself, or for gzip an anonymous mapping that
    is inflated into as it is read (:class:`.inflate.Inflating`). The pages a slice was decoded from are
    handed back after it (:func:`decode`), so the JSON is never resident whole. None for a small trace, or
    for anything the whole-file read must look at (a gzip trailer saying more than the bomb limit)."""
    if not hasattr(mmap, "MADV_DONTNEED"):
        return None
    try:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if fh.read(2) == b"\x1f\x8b":
                fh.seek(-4, os.SEEK_END)
                inflated = int.from_bytes(fh.read(4), "little")     # the trailer: the size modulo 4 GiB
                if inflated < size:
                    # No one member of JSON inflates to less than it takes: several members (bgzip ends in an
                    # empty one) or past 4 GiB. The trailer is not the JSON's size; counting it costs a pass.
                    inflated = inflated_size(Path(path), max_inflate(size)) or 0
                if inflated <= SLICE_BYTES or inflated > max_inflate(size):
                    return None
                return Inflating(Path(path), inflated)
            if size <= SLICE_BYTES:
                return None
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None             # the whole-file read says what is wrong


def decode(holder: list, path, meta: RunMeta, epoch_times) -> KinetoColumns | None:
    """The columns of the JSON in ``holder`` (a one-item list of bytes or a :func:`big_source`, emptied
    here: the caller keeps no reference), or None when the whole-file decode must read it."""
    raw = holder.pop()
    if not isinstance(raw, Inflating):
        return _decode(raw, None, path, meta, epoch_times)
    tried = len(raw)
    try:
        cols = _decode(raw.mapping, raw, path, meta, epoch_times)
        if cols is not None or not raw.too_small():
            return cols
    finally:
        raw.close()
    # Several members, the last one's trailer the size tried: once more at the size they all inflate to.
    size = inflated_size(Path(path), max_inflate(os.stat(path).st_size))
    if size is None or size == tried or size <= SLICE_BYTES:
        return None
    return decode([Inflating(Path(path), size)], path, RunMeta(source=meta.source, format=meta.format,
                                                               bytes=meta.bytes), epoch_times)


def _decode(raw, inflating: Inflating | None, path, meta: RunMeta, epoch_times) -> KinetoColumns | None:
    release = _Release(raw if isinstance(raw, mmap.mmap) else None)
    fill = inflating.fill if inflating is not None else None
    try:
        parts = split.split(raw, SLICE_EVENTS, release, fill)
        if parts is not None and inflating is not None:
            inflating.finish()
            inflating.restart()         # the slices are read in a second pass over the stream
    except InflateError:
        return None
    if parts is None:
        return None
    release.restart()
    doc = header_document(parts.header, parts.marker)
    if doc is None:
        return None
    fill_meta(doc, meta, path)
    joined = Joined(doc.baseTimeNanoseconds or 0, meta)
    for index in range(len(parts.slices)):
        try:
            if fill is not None:
                fill(parts.slices[index][1])
            chunk = [parts.text(raw, index)]
        except InflateError:
            return None
        if not joined.decode(chunk, epoch_times):
            return None
        release(parts.slices[index][1])      # the slice's text is back in the page cache only
    return joined.columns(meta)


def header_document(header: bytes | None, marker: bytes) -> Document | None:
    """The document's keys besides its events: ``header`` is the document with ``marker`` in the events'
    place (None: the document is the bare array). None when the header does not decode or the marker is not
    where the events were: the array cut is then not the one the whole-file decode reads."""
    doc = Document()
    if header is None:
        return doc
    try:
        top = RAW_DOC.decode(header)
        if isinstance(top, list) or bytes(top.traceEvents) != marker:
            return None
        for name, decoder in HEADER.items():
            text = getattr(top, name)
            if text:
                setattr(doc, name, decoder.decode(text))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):   # ValidationError is a DecodeError
        return None
    return doc


class _Release:
    """Hands the pages of a mapping before an offset back (a file's to the page cache; an inflated stream's
    are dropped, and inflated again on the next pass); a no-op for bytes."""

    def __init__(self, mapping: mmap.mmap | None) -> None:
        self.mapping, self.done = mapping, 0

    def __call__(self, offset: int) -> None:
        if self.mapping is None:
            return
        upto = offset // mmap.PAGESIZE * mmap.PAGESIZE
        if upto > self.done:
            self.mapping.madvise(mmap.MADV_DONTNEED, self.done, upto - self.done)
            self.done = upto

    def restart(self) -> None:
        self.done = 0


class Joined:
    """The slices' columns, joined at the end. ``base``: the document's baseTimeNanoseconds; ``meta``: the
    file's (its source names the slices' notes, which are counted once per file)."""

    def __init__(self, base: int, meta: RunMeta) -> None:
        self.base = base
        self.scratch = RunMeta(source=meta.source, format=meta.format)
        self.n_out = self.n_used = self.n_negative = 0
        self.device: list[dict] = []
        self.host: list[dict] = []
        self.comm_device: list[dict] = []
        self.comm_host: list[dict] = []
        self.comm_args: tuple[list, list] = ([], [])
        self.metas: list = []
        self.rows = [0, 0]
        self.ids: dict = {}          # raw-text ids (launch configurations, input shapes) across the slices

    def decode(self, holder: list, epoch_times) -> bool:
        """Add the events of the JSON array of whole events in ``holder`` (a one-item list, emptied: its
        text is let go as soon as the times are read); False when it is not clean (the whole-file decode
        must read the file) or holds no event ("[ ]": a trailing comma, which the whole file's decode
        refuses)."""
        chunk = holder.pop()
        try:
            events = EVENTS.decode(chunk)
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return False
        if not events:
            return False
        xs = [e for e in events if e.__class__ is Event]
        self.metas += [e for e in events if e.__class__ is MetaEvent]
        codes, cat_names, dev_mask, host_mask = event_categories(xs)
        start, dur = event_times(chunk, events, xs, self.scratch)
        del chunk, events
        start, end, outside = epoch_times(start, dur, self.base)
        used = dev_mask | host_mask
        self.n_used += int(used.sum())
        if outside.any():
            self.n_out += int((used & outside).sum())
            dev_mask, host_mask = dev_mask & ~outside, host_mask & ~outside
        self.n_negative += int(((dev_mask | host_mask) & (dur < 0)).sum())
        self.add(xs, codes, cat_names, dev_mask, host_mask, start, end)
        return True

    def add(self, xs, codes, cat_names, dev_mask, host_mask, start, end) -> None:
        dev_rows, host_rows = np.flatnonzero(dev_mask), np.flatnonzero(host_mask)
        dev_events = [xs[i] for i in dev_rows.tolist()]
        host_events = [xs[i] for i in host_rows.tolist()]
        # The kinds stay the sorted category names until joined: DEVICE_CATS maps them at the end.
        device, dev_args = device_columns(dev_events, subset_labels(codes[dev_rows], cat_names), start[dev_rows],
                                          end[dev_rows], self.ids)
        host, host_args = host_columns(host_events, subset_labels(codes[host_rows], cat_names), start[host_rows],
                                       end[host_rows], self.ids)
        dev_comm = [i for i, a in enumerate(dev_args) if a.collective is not None]
        names = host["name"]
        carries = np.array([n == "record_param_comms" or n.startswith(("nccl:", "gloo:")) for n in names.categories]
                           + [False], dtype=bool)
        host_comm = np.flatnonzero(carries[names.codes]).tolist()
        self.comm_args[0].extend(dev_args[i] for i in dev_comm)
        self.comm_args[1].extend(host_args[i] for i in host_comm)
        for parts, args, wanted, table, k in ((self.comm_device, dev_args, dev_comm, "device", 0),
                                              (self.comm_host, host_args, host_comm, "host", 1)):
            part = comm_meta_of(args, wanted, table)
            part["row"] = part["row"] + self.rows[k]
            parts.append(part)
        self.rows[0] += len(dev_events)
        self.rows[1] += len(host_events)
        self.device.append(device)
        self.host.append(host)

    def extend(self, later: Joined) -> None:
        """Join the columns of ``later``, decoded in another process from the events after these, as if its
        events had been added here: its raw-text ids renumbered into these (first-seen order over both), its
        collective rows offset past these rows, its notes and counts added."""
        for key, theirs in later.ids.items():
            ours = self.ids.setdefault(key, {b"": -1})
            remap = np.empty(max(len(theirs) - 1, 0), dtype=np.int64)
            for text, i in theirs.items():
                if i >= 0:
                    remap[i] = ours.setdefault(text, len(ours) - 1)
            column = _ID_COLUMNS[key]
            for table in later.device if column[0] == "device" else later.host:
                ids = table[column[1]]
                table[column[1]] = np.where(ids >= 0, remap[np.maximum(ids, 0)], -1) if remap.size else ids
        for parts, theirs, k in ((self.comm_device, later.comm_device, 0), (self.comm_host, later.comm_host, 1)):
            for part in theirs:
                part["row"] = part["row"] + self.rows[k]
                parts.append(part)
        self.device += later.device
        self.host += later.host
        self.comm_args[0].extend(later.comm_args[0])
        self.comm_args[1].extend(later.comm_args[1])
        self.metas += later.metas
        self.rows = [self.rows[0] + later.rows[0], self.rows[1] + later.rows[1]]
        self.n_out += later.n_out
        self.n_used += later.n_used
        self.n_negative += later.n_negative
        for w in later.scratch.warnings:
            self.scratch.warnings.add(w.code, w.message, w.count)

    def columns(self, meta: RunMeta) -> KinetoColumns | None:
        """The file's columns, its notes added to ``meta``; None when the whole-file decode must say what is
        wrong (no event it can use)."""
        if self.n_out and self.n_out == self.n_used:
            return None                 # the whole-file decode raises what is wrong
        if not self.rows[0] and not self.rows[1]:
            return None
        for w in self.scratch.warnings:
            meta.warnings.add(w.code, w.message, 1)
        meta.warnings.add("out-of-range-times", "skipped events whose start or end, in ns since the epoch, "
                          "is negative or does not fit int64 (a huge ts, dur or baseTimeNanoseconds)", self.n_out)
        meta.warnings.add("negative-duration", "events with a negative duration were clamped to 0", self.n_negative)
        device = _join(self.device, sorted_labels=("kind",))
        device["kind"] = DecodedLabels(device["kind"].codes, [DEVICE_CATS[c] for c in device["kind"].categories])
        host = _join(self.host, sorted_labels=("cat",))
        pg_members(self.comm_args[0] + self.comm_args[1], meta)
        comm = merge_comm_meta(self.comm_device + self.comm_host)
        return KinetoColumns(meta, device, host, thread_names(self.metas), comm)


# The columns of the raw-text ids (event_columns._raw_ids), by the name their ids are kept under.
_ID_COLUMNS = {"config": ("device", "config"), "shapes": ("host", "shapes")}


def _join(parts: list[dict], sorted_labels=()) -> dict:
    out = {}
    for name, first in parts[0].items():
        if isinstance(first, DecodedLabels):
            out[name] = _join_labels([p[name] for p in parts], name in sorted_labels)
        else:
            out[name] = np.concatenate([p[name] for p in parts])
    return out


def _join_labels(parts: list[DecodedLabels], sort: bool) -> DecodedLabels:
    """One categorical of the slices': categories in first-seen order (or sorted, as :func:`subset_labels` has
    them), each slice's codes renumbered; -1 stays missing."""
    seen = list(dict.fromkeys(c for p in parts for c in p.categories))
    if sort:
        seen.sort()
    index = {c: i for i, c in enumerate(seen)}
    codes = [np.array([index[c] for c in p.categories] + [-1], dtype=np.int64)[p.codes] for p in parts]
    return DecodedLabels(np.concatenate(codes) if codes else np.zeros(0, np.int64), seen)
