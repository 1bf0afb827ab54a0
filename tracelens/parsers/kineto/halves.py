"""One mid-size Kineto trace decoded on two cores: a worker decodes the first part of its events while this
process decodes the rest, and the two parts' columns are joined as one pass would have made them.

A report of one file has nothing else for a second core to do (:func:`tracelens.pool.plan` decides when
this pays: bench/RESULTS.md, "One file on two cores"). Once the report's cache is missed, a pool worker is
forked and imports the decode stages (numpy, msgspec) while this process inflates the file (a gzip trace
into an anonymous mapping shared with the worker, so the JSON is inflated once) and finds the cut: where the
``traceEvents`` array opens and closes, and a gap between two events near ``SHARE`` of the way through it.
The worker is given the cut and decodes the events before it into columns (:class:`.slices.Joined`, the
slice decode's own); this process imports the same stages, decodes the events after the cut, imports what
the analysis needs, and joins the worker's columns to its own (:meth:`.slices.Joined.extend`).

The cut is found without a scan of the JSON (a scan costs a third of the decode): the array's opening is
the first ``"traceEvents": [``, its end the ``]`` after a ``}`` that the rest of the document can follow,
the gap the first ``}, {`` past the middle. None of that is trusted: the part before the gap decodes as a
list only if the gap lies between two events of the array (a gap inside a string or an event would leave it
unterminated), the part after it only if the end is the array's, and the document around the array only if
the array is where a whole-file decode reads it (:func:`.slices.header_document`). Any failure, and any file
that is not clean, leaves the file to the whole-file decode, which repairs it or says what is wrong.
"""

from __future__ import annotations

import functools
import mmap
import os
import re
from pathlib import Path
from typing import Callable, NamedTuple

from ... import pool

SHARE = 0.5         # of the events, decoded by the worker (bench/RESULTS.md, "One file on two cores")
_OPEN = re.compile(rb'"traceEvents"[ \t\n\r]*:[ \t\n\r]*\[')
_GAP = re.compile(rb"\}[ \t\n\r]*,[ \t\n\r]*\{")
_TAIL = 1 << 20     # bytes from the end that the array's closing bracket is looked for in
_WS = b" \t\n\r"


class Cut(NamedTuple):
    """Where the parts are, as byte offsets of the JSON: ``open`` and ``close`` are the array's brackets,
    the first part ends at ``first_end`` (after an event's ``}``) and the second starts at ``second_start``
    (its next event's ``{``); ``bare``: the document is the array itself."""

    open: int
    close: int
    first_end: int
    second_start: int
    bare: bool
    marker: bytes


def find_cut(raw, share: float = SHARE) -> Cut | None:
    """The cut of the JSON ``raw`` (bytes or a mapping), or None where none is found (the whole-file decode
    reads the file)."""
    n = len(raw)
    start = 0
    while start < n and raw[start] in _WS:
        start += 1
    if start < n and raw[start] == ord("["):
        bare, opening = True, start
    else:
        m = _OPEN.search(raw)
        if m is None:
            return None
        bare, opening = False, m.end() - 1
    close = _close(raw, opening, bare)
    if close < 0:
        return None
    gap = _GAP.search(raw, opening + 1 + int((close - opening - 1) * share), close)
    if gap is None:
        return None
    marker = b'"tracelens:' + os.urandom(8).hex().encode() + b'"'      # a string no file holds
    return Cut(opening, close, gap.start() + 1, gap.end() - 1, bare, marker)


def _close(raw, opening: int, bare: bool) -> int:
    """Where the events' array closes: of the ``]`` after a ``}`` in the last _TAIL bytes, walking back from
    the end, the earliest of the run that the rest of the document can follow (the other keys may come after
    the events, lists of objects among them); -1 when none is found."""
    n = len(raw)
    upto, found = n, -1
    floor = max(opening + 1, n - _TAIL)
    while True:
        j = raw.rfind(b"]", floor, upto)
        if j < 0:
            return found
        upto = j
        k = j - 1
        while k > opening and raw[k] in _WS:
            k -= 1
        if raw[k] != ord("}"):
            continue
        if _ends_document(bytes(raw[j + 1:]), bare):
            found = j
        elif found >= 0:
            return found


def _ends_document(rest: bytes, bare: bool) -> bool:
    """Whether ``rest`` can follow the events' array: nothing, for a bare array; else the rest of the object."""
    if bare:
        return not rest.strip(_WS)
    # lazy: the standard library's parser, once a file is cut (before the decode stages' msgspec is imported)
    import json

    try:
        json.loads(b'{"":0' + rest)
    except (ValueError, RecursionError):       # UnicodeDecodeError is a ValueError
        return False
    return True


def part_text(raw, cut: Cut, which: int) -> bytearray:
    """Part ``which`` (0, 1) of the events as a JSON array: the only copy of its bytes that is made."""
    start, stop = (cut.open + 1, cut.first_end) if which == 0 else (cut.second_start, cut.close)
    out = bytearray(stop - start + 2)
    out[0], out[-1] = ord("["), ord("]")
    out[1:-1] = memoryview(raw)[start:stop]
    return out


def header(raw, cut: Cut) -> bytes | None:
    """The document with the marker in the array's place (None: the document is the array)."""
    if cut.bare:
        return None if not bytes(raw[cut.close + 1:]).strip(_WS) else b"!"     # "!": no document, refused
    return bytes(raw[:cut.open]) + cut.marker + bytes(raw[cut.close + 1:])


def decode_part(raw, cut: Cut, which: int, path, epoch_times):
    """Part ``which`` of the events decoded into columns (a :class:`.slices.Joined`) and the document around
    them; None when they are not clean."""
    # lazy: the decode stages (numpy, msgspec), in the worker once forked and here once the imports are done
    from ...model.meta import RunMeta
    from .event_columns import fill_meta
    from .slices import Joined, header_document

    doc = header_document(header(raw, cut), cut.marker)
    if doc is None:
        return None
    meta = RunMeta(source=str(path), format="kineto", bytes=Path(path).stat().st_size)
    fill_meta(doc, meta, Path(path))
    joined = Joined(doc.baseTimeNanoseconds or 0, meta)
    if not joined.decode([part_text(raw, cut, which)], epoch_times):
        return None
    return joined, meta


class Halves:
    """The worker decoding the first part of ``path`` (a Kineto trace), forked now,
    importing the decode stages while :meth:`begin` inflates the file and cuts it here; :meth:`take` gives the
    file's columns, None when this process must decode it whole."""

    def __init__(self, path: Path, meanwhile: Callable[[], None] | None = None) -> None:
        """``meanwhile()``: run here once this process's part is decoded, while the worker may still decode
        its own (the caller's imports for what comes after the decode)."""
        self.path = Path(path)
        size = pool.json_bytes(self.path)
        self.meanwhile = meanwhile
        self.cut: Cut | None = None
        try:
            with open(self.path, "rb") as fh:
                gzipped = fh.read(2) == b"\x1f\x8b"
        except OSError:
            gzipped = False     # unreadable: the whole-file decode says so
        # Shared with the forked worker: the JSON is inflated once, here, and read by both.
        self.mapping = mmap.mmap(-1, size) if gzipped and size > 0 else None
        self.raw = self.mapping
        self._pool = pool.Pool(1, 1, functools.partial(_job, self.path, self.mapping), _imports, fork=True)

    def begin(self) -> None:
        """Inflate the file and cut it, then let the worker decode the first part. A report the cache answers
        never calls this: its worker is killed having imported, not inflated, anything."""
        if not self._pool.workers:
            return
        if self.mapping is not None:
            # lazy: ISA-L, for a first report only
            from .inflate import InflateError, Inflating

            try:
                inflating = Inflating(self.path, len(self.mapping), self.mapping)
                inflating.finish()
                inflating.fh.close()    # not close(): the mapping is the JSON both processes read
            except (InflateError, OSError):
                self.close()            # not what its trailer says: the whole-file decode says why
                return
        else:
            self.raw = _file_bytes(self.path)
        self.cut = find_cut(self.raw) if self.raw is not None else None
        if self.cut is None:
            self.close()
            return
        self._pool.start(self.cut)

    def take(self, path: Path):
        if Path(path) != self.path or self.cut is None or not self._pool.workers:
            self.close()
            return None
        try:
            return self._take()
        finally:
            self.close()

    def _take(self):
        # lazy: the decode stage, here once the report's imports are done
        from .decode import epoch_times

        mine = decode_part(self.raw, self.cut, 1, self.path, epoch_times)
        if mine is None:
            return None
        if self.meanwhile is not None:
            self.meanwhile()
        answer = self._pool.answer(0)
        if answer is None or answer[0] != "ok" or answer[1] is None:
            return None
        first, _ = answer[1]
        later, meta = mine
        first.extend(later)
        return first.columns(meta)

    def close(self) -> None:
        self._pool.close()
        self.cut = None
        if self.raw is not None and self.raw is not self.mapping:
            self.raw.close()
        self.raw = None
        if self.mapping is not None:
            try:
                self.mapping.close()
            except BufferError:     # a view of it still held (by an exception's frames): freed with the view
                pass
            self.mapping = None


def _file_bytes(path: Path):
    try:
        with open(path, "rb") as fh:
            return mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None


def _imports() -> None:
    """The worker's imports, while this process inflates and cuts the file."""
    # lazy: the decode stages (numpy, msgspec), in the worker right after its fork (the point of this function)
    from . import decode, slices  # noqa: F401


def _job(path: Path, mapping, cut: Cut, i: int):
    """The worker's job: decode the first part of the JSON (the shared mapping, or the file mapped again)."""
    # lazy: the decode stage, imported by _imports already
    from .decode import epoch_times

    raw = mapping if mapping is not None else _file_bytes(path)
    if raw is None:
        return None
    return decode_part(raw, cut, 0, path, epoch_times)
