"""Kineto traces, stage 1 of 4: the file's bytes, gunzipped when the magic bytes say gzip.

Apart so that what can go wrong with the file itself (unreadable, truncated or corrupt gzip, a gzip bomb)
is answered in one place, before any JSON is looked at. A big gzip trace decoded in slices is inflated as it
is read instead (:class:`Inflating`); anything wrong with its stream sends it back to :func:`read_bytes`.
Every reader of gzip (these, ``tracelens annotate``'s copy, the sniff of a folder's files) inflates through
:class:`Members`, so that a file of several gzip members reads as ``gzip -d`` reads it.
"""

from __future__ import annotations

import mmap
import os
import re
import zlib
from pathlib import Path
from typing import Callable

try:  # ISA-L inflates faster than zlib (bench/RESULTS.md, "ISA-L inflate"); same checks and errors.
    from isal import isal_zlib as _inflate
except ImportError:  # pragma: no cover - platforms without an isal wheel
    _inflate = zlib

from ...errors import InputError, UsageError
from . import MAX_INFLATE_ENV
# Real traces inflate 10-30x (the corpus: 9.9-30.3x); a gzip bomb inflates ~1000x. 100x the file, and at
# least 1 GiB, never stops a real trace and keeps a bomb of a few KB to 1 GiB of memory.
INFLATE_RATIO = 100
INFLATE_FLOOR = 1 << 30
_SIZE = re.compile(r"(\d+)\s*([kmgt]?)i?b?", re.IGNORECASE)


def max_inflate(compressed: int) -> int:
    """How many bytes a gzip trace of ``compressed`` bytes may inflate to (``TRACELENS_MAX_INFLATE``
    when set: bytes, or with a K/M/G/T suffix)."""
    value = os.environ.get(MAX_INFLATE_ENV, "").strip()
    if not value:
        return max(INFLATE_FLOOR, INFLATE_RATIO * compressed)
    m = _SIZE.fullmatch(value)
    if not m:
        raise UsageError(f"{MAX_INFLATE_ENV} must be a size in bytes (e.g. 8G, 500M or 1048576), not {value!r}")
    return int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower() or " "))


def read_bytes(path: Path) -> bytes:
    """File contents, gunzipped when the magic bytes say gzip (whatever the suffix)."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read file: {exc.strerror or exc}", path=str(path)) from None
    if raw[:2] == b"\x1f\x8b":
        cap = max_inflate(len(raw))
        try:
            # Each member's CRC is checked in C by the gzip mode (gzip.decompress would run a second crc32
            # pass); the room left stops a bomb at the cap instead of at the end of memory. One piece for a
            # file of one member: inflated in one call, never copied.
            members = Members(lambda size: b"", first=raw)
            pieces, room = [], cap + 1
            while room > 0 and (piece := members.inflate(room)):
                pieces.append(piece)
                room -= len(piece)
            if room <= 0:
                raise InputError(f"gzip data inflates to more than {cap:,} bytes (a gzip bomb?); set "
                                 f"{MAX_INFLATE_ENV} to a larger size to read it", path=str(path))
            raw = pieces[0] if len(pieces) == 1 else b"".join(pieces)
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InputError(f"truncated or corrupt gzip data ({exc})", path=str(path)) from None
    return raw


def inflated_size(path: Path, cap: int) -> int | None:
    """How many bytes the gzip file at ``path`` inflates to, every member counted and nothing kept; None past
    ``cap`` or for a stream that does not read (the whole-file read says why)."""
    try:
        with open(path, "rb") as fh:
            members = Members(fh.read)
            total = 0
            while total <= cap and (piece := members.inflate(4 << 20)):
                total += len(piece)
    except (EOFError, OSError, zlib.error, _inflate.error):
        return None
    return total if total <= cap else None


class Members:
    """The members of a gzip stream inflated one after the other, as ``gzip -d`` and Python's gzip read them:
    ``cat a.gz b.gz``, bgzip and log shippers write several, and a reader that stopped at the first would
    see a trace cut short. NUL bytes after a member are padding (both skip them); any other byte that does
    not open another member is corrupt data (zlib.error, whichever library inflates), and a stream cut short
    is EOFError.

    ``read(size)``: the next compressed bytes, empty at the end of the file (a file's ``read``), asked for
    ``chunk`` bytes at a time; ``first``: the bytes read before it (all of them, for a file read whole)."""

    def __init__(self, read: Callable[[int], bytes], chunk: int = 1 << 20, first: bytes = b"") -> None:
        self.read = read
        self.chunk = chunk
        self.inflater = _inflate.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self.count = 1          # members begun
        self.pending = first    # compressed bytes not yet given to the inflater
        self.ended = False

    def inflate(self, most: int) -> bytes:
        """Up to ``most`` more inflated bytes (``most`` > 0); empty only after the last member."""
        while not self.ended:
            if self.inflater.eof:
                self._next_member()
                continue
            data = self.inflater.unconsumed_tail
            if not data:
                data, self.pending = self.pending or self.read(self.chunk), b""
            if not data:
                raise EOFError("compressed data ended before the end-of-stream marker")
            try:
                out = self.inflater.decompress(data, most)
            except _inflate.error as exc:     # ISA-L's own class: one class for every caller to catch
                raise zlib.error(str(exc)) from None
            if out:
                return out
        return b""

    def _next_member(self) -> None:
        rest = self.inflater.unused_data
        while not rest.lstrip(b"\0"):
            rest = self.read(self.chunk)
            if not rest:
                self.ended = True
                return
        rest = rest.lstrip(b"\0")
        if len(rest) < 2:
            rest += self.read(self.chunk)
        if rest[:2] != b"\x1f\x8b":
            raise zlib.error(f"bytes after gzip member {self.count} that are not a gzip member")
        self.inflater = _inflate.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self.pending = rest
        self.count += 1


class InflateError(Exception):
    """A gzip stream that is not what its trailer says: read it with :func:`read_bytes`, which says why."""


class Inflating:
    """A big gzip trace inflated on demand into an anonymous mapping of its JSON size, from the start again
    for each pass over it: only the pages between what the reader has let go of (``madvise``) and what it
    asked for (:meth:`fill`) are resident, never the whole JSON. Anything unexpected in the stream (corrupt,
    truncated, longer or shorter than its trailer says) raises InflateError."""

    CHUNK = 1 << 20

    def __init__(self, path: Path, size: int, mapping: mmap.mmap | None = None) -> None:
        """``mapping``: where to inflate to (of ``size`` bytes; one shared with another process), else a new
        one."""
        self.path = path
        self.mapping = mmap.mmap(-1, size) if mapping is None else mapping
        self.fh = None
        self.restart()

    def restart(self) -> None:
        if self.fh is not None:
            self.fh.close()
        self.fh = open(self.path, "rb")
        self.members = Members(self.fh.read, self.CHUNK)
        self.filled = 0
        self.longer = False     # more JSON found than the mapping holds

    def too_small(self) -> bool:
        """Whether the stream is of several members and holds more than the mapping: the trailer the mapping
        was sized by is then only the last member's size, which is no sign of damage."""
        if not self.longer and self.filled == len(self.mapping):
            try:
                self.longer = bool(self.members.inflate(1))
            except (EOFError, OSError, zlib.error):
                return False
        return self.longer and self.members.count > 1

    def fill(self, upto: int) -> None:
        """Inflate until the JSON before ``upto`` (at most the whole of it) is in the mapping."""
        upto = min(upto, len(self.mapping))
        try:
            while self.filled < upto:
                out = self.members.inflate(min(len(self.mapping) - self.filled + 1, 4 * self.CHUNK))
                if not out:
                    raise InflateError("shorter than its trailer says")
                if self.filled + len(out) > len(self.mapping):
                    self.longer = True
                    raise InflateError("longer than its trailer says")
                self.mapping[self.filled:self.filled + len(out)] = out
                self.filled += len(out)
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InflateError(str(exc)) from None

    def finish(self) -> None:
        """Check that the stream ends, every member's CRC included, where the JSON does."""
        self.fill(len(self.mapping))
        try:
            if self.members.inflate(1):
                self.longer = True
                raise InflateError("longer than its trailer says")
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InflateError(str(exc)) from None

    def __len__(self) -> int:
        return len(self.mapping)

    def close(self) -> None:
        self.fh.close()
        try:
            self.mapping.close()
        except BufferError:     # a view of it still held (by an exception's frames): freed with the view
            pass
