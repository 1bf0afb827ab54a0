"""The annotated traces as files (``tracelens annotate``): their names, the refusal to overwrite, and the
writing, streamed.

A Kineto trace is copied through as it is, byte for byte, with the added events (:mod:`.renderers.added_tracks`)
inserted just after the ``[`` that opens its events: only the head of the file up to that bracket is looked
at (the Kineto parser's scan, ``kineto.events_start``), and the rest is copied in chunks, inflated and
deflated as it goes when gzipped, so memory stays at a chunk and the head whatever the trace's size. An nsys
export gets an overlay instead: a trace of the added events alone, on the export's clock. A file is written
under a temporary name and moved into place once whole, so that a failed write leaves no half trace.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path
from typing import Iterable

try:  # ISA-L deflates several times faster than zlib at the same ratio class; gzip streams either way.
    from isal import isal_zlib as _deflate
    _LEVEL = 2          # ISA-L's levels are 0-3
except ImportError:  # pragma: no cover - platforms without an isal wheel
    _deflate, _LEVEL = zlib, 6

from . import outputs
from .errors import InputError, UsageError
from .renderers.added_tracks import MARK

CHUNK = 1 << 20                         # bytes copied at a time
SUFFIX = ".tracelens.json"
_OURS = re.compile(r"rank\d+\.tracelens\.json(\.gz)?")


def name(rank: int, gz: bool) -> str:
    """The file name of ``rank``'s annotated trace (gzipped or not)."""
    return f"rank{rank}{SUFFIX}{'.gz' if gz else ''}"


def existing(out_dir: str | Path) -> list[str]:
    """The files an annotation into ``out_dir`` may overwrite: the annotated traces of an earlier one."""
    out = Path(out_dir)
    if not out.is_dir():
        return []
    return sorted((p.name for p in out.iterdir() if _OURS.fullmatch(p.name)), key=_natural)


def _natural(text: str) -> tuple:
    return tuple(int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text))


def is_gzip(path: Path) -> bool:
    """Whether a trace is gzipped, by its content (a file that cannot be read is the copy's to report)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def write_kineto(source: Path, out: Path, added: list[bytes]) -> None:
    """``source``'s trace with ``added`` inserted first among its events, written to ``out`` (gzipped when
    its name ends in ``.gz``)."""
    # lazy: the scan's numpy, for a Kineto input only
    from .parsers.kineto import EVENTS_WITHIN, events_start

    with _Writer(out) as sink, _Reader(source) as reader:
        head = b""
        while True:
            more = reader.read(max(CHUNK, len(head)))
            head += more
            at = events_start(head)
            if (at is None and len(head) >= EVENTS_WITHIN) or (at is not None and at >= EVENTS_WITHIN):
                raise InputError("cannot annotate: its 'traceEvents' array does not open within its first "
                                 f"{EVENTS_WITHIN >> 20} MiB ({EVENTS_WITHIN:,} bytes)", path=str(source))
            # The bracket, and the first byte after it that is not blank (an empty array takes no comma).
            rest = head[at + 1:].lstrip(b" \t\n\r") if at is not None else b""
            if at is not None and (rest or not more):
                break
            if not more:
                raise InputError("cannot annotate: no 'traceEvents' array found in it", path=str(source))
            if len(head) >= 2 * EVENTS_WITHIN:      # blanks after the bracket, as many again: held no further
                raise InputError("cannot annotate: nothing but blanks after its events array opens, for "
                                 f"{EVENTS_WITHIN >> 20} MiB", path=str(source))
        if rest.startswith(MARK):       # the events an earlier annotation inserted
            raise UsageError("already an annotated trace (tracelens annotate wrote it): annotate the trace it was "
                             "made from", path=str(source))
        empty = rest[:1] == b"]"
        sink.write(head[:at + 1] + b"\n" + b",\n".join(added) + (b"\n" if empty or not added else b",\n"))
        sink.write(head[at + 1:])
        del head
        while True:
            more = reader.read(CHUNK)
            if not more:
                break
            sink.write(more)


def write_overlay(out: Path, pieces: Iterable[bytes]) -> None:
    """A trace of its own (the overlay of an nsys export), from ``pieces`` of its JSON."""
    with _Writer(out) as sink:
        for piece in pieces:
            sink.write(piece)


class _Reader:
    """A trace's bytes in chunks, inflated when the file is gzipped (whatever its name)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            self.fh = open(path, "rb")
        except OSError as exc:
            raise InputError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from None
        gzipped = self.fh.read(2) == b"\x1f\x8b"
        self.fh.seek(0)
        if gzipped:
            from .parsers.kineto import Members      # lazy: ISA-L, for a gzip trace only

            self.members = Members(self.fh.read, CHUNK)
        else:
            self.members = None

    def read(self, n: int) -> bytes:
        try:
            return self.fh.read(n) if self.members is None else self.members.inflate(n)
        except (EOFError, OSError, zlib.error) as exc:
            raise InputError(f"truncated or corrupt gzip data ({exc})", path=str(self.path)) from None

    def __enter__(self) -> "_Reader":
        return self

    def __exit__(self, *exc) -> None:
        self.fh.close()


class _Writer:
    """``out`` written as every tracelens output is (:func:`tracelens.outputs.replacing`: a fresh temporary
    name beside it, moved into place when whole, nothing left on a failure), deflated when its name ends in
    ``.gz``."""

    def __init__(self, out: Path) -> None:
        self.out = out
        self.deflater = _deflate.compressobj(_LEVEL, zlib.DEFLATED, 16 + zlib.MAX_WBITS) \
            if out.name.endswith(".gz") else None
        self._replacing = outputs.replacing(out)
        self.fh = None

    def __enter__(self) -> "_Writer":
        self.fh = self._replacing.__enter__()
        return self

    def write(self, data: bytes) -> None:
        self.fh.write(self.deflater.compress(data) if self.deflater is not None else data)

    def __exit__(self, kind, exc, tb) -> bool:
        if kind is None and self.deflater is not None:
            try:
                self.fh.write(self.deflater.flush())
            except BaseException as failed:       # a full disk at the last bytes: no file, as any failure
                self._replacing.__exit__(type(failed), failed, failed.__traceback__)
                raise
        return self._replacing.__exit__(kind, exc, tb)


def identities(paths: list[Path]) -> set:
    """The files ``paths`` are (device, inode), to tell an output that would be one of them."""
    return {_identity(p) for p in paths} - {None}


def check_output(out: Path, inputs: set) -> None:
    """An output that is one of the ``inputs`` (:func:`identities`; a folder's annotated traces annotated
    into itself) is refused: an input is never written to."""
    if _identity(out) in inputs:
        raise UsageError("the annotated trace would overwrite an input: choose another output folder",
                         path=str(out))


def _identity(path: Path):
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
