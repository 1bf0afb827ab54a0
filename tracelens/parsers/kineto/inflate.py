"""Kineto traces, stage 1 of 4: the file's bytes, gunzipped when the magic bytes say gzip.

Apart so that what can go wrong with the file itself (unreadable, truncated or corrupt gzip, a gzip bomb)
is answered in one place, before any JSON is looked at. A big gzip trace decoded in slices is inflated as it
is read instead (:class:`Inflating`); anything wrong with its stream sends it back to :func:`read_bytes`.
"""

from __future__ import annotations

import mmap
import os
import re
import zlib
from pathlib import Path

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
            # gzip mode checks the CRC in C; gzip.decompress would run a second crc32 pass. max_length
            # stops a bomb at the cap instead of at the end of memory.
            inflater = _inflate.decompressobj(wbits=16 + zlib.MAX_WBITS)
            out = inflater.decompress(raw, cap + 1)
            if len(out) > cap:
                raise InputError(f"gzip data inflates to more than {cap:,} bytes (a gzip bomb?); set "
                                 f"{MAX_INFLATE_ENV} to a larger size to read it", path=str(path))
            if not inflater.eof:
                raise EOFError("compressed data ended before the end-of-stream marker")
            raw = out
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InputError(f"truncated or corrupt gzip data ({exc})", path=str(path)) from None
    return raw


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
        self.inflater = _inflate.decompressobj(wbits=16 + zlib.MAX_WBITS)
        self.filled = 0

    def fill(self, upto: int) -> None:
        """Inflate until the JSON before ``upto`` (at most the whole of it) is in the mapping."""
        upto = min(upto, len(self.mapping))
        try:
            while self.filled < upto:
                out = self._more(len(self.mapping) - self.filled + 1)
                if self.filled + len(out) > len(self.mapping):
                    raise InflateError("longer than its trailer says")
                self.mapping[self.filled:self.filled + len(out)] = out
                self.filled += len(out)
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InflateError(str(exc)) from None

    def finish(self) -> None:
        """Check that the stream ends, its CRC included, where the JSON does."""
        self.fill(len(self.mapping))
        try:
            while not self.inflater.eof:
                if self._more(1):
                    raise InflateError("longer than its trailer says")
        except (EOFError, OSError, zlib.error, _inflate.error) as exc:
            raise InflateError(str(exc)) from None

    def _more(self, room: int) -> bytes:
        if self.inflater.eof:
            raise InflateError("shorter than its trailer says")
        data = self.inflater.unconsumed_tail or self.fh.read(self.CHUNK)
        if not data:
            raise InflateError("truncated")
        return self.inflater.decompress(data, min(room, 4 * self.CHUNK))

    def __len__(self) -> int:
        return len(self.mapping)

    def close(self) -> None:
        self.fh.close()
        try:
            self.mapping.close()
        except BufferError:     # a view of it still held (by an exception's frames): freed with the view
            pass
