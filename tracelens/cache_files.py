"""The cache's entries as files: each written whole under a temporary name and renamed into place, read back
only when its magic, length, key and CRC all match (else removed: a miss), and the bound on their total size
kept by removing the least recently used first. The layers and their keys are :mod:`tracelens.cache`'s."""

from __future__ import annotations

import os
import pickle
import stat
import struct
import time
import zlib
from pathlib import Path

from . import outputs

MAGIC = b"TLCACHE2"            # the last digit is the layout's version: a new layout never reads an old one
# Temporary files older than this are left over from a killed writer (a live one renames within seconds).
STALE_TMP_S = 3600


def read(entry: Path, k: tuple) -> tuple | None:
    """(the column bytes, the header's description) of a sound entry for key ``k``; a damaged or stale one
    is removed."""
    try:
        # Not blocking at the open: a FIFO at an entry's name would wait for a writer forever.
        with open(os.open(entry, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):        # no entry of ours: removed, as any damaged one
                unlink(entry)
                return None
            blob = bytearray(st.st_size)
            got = fh.readinto(blob)
    except OSError:
        return None
    found = _unframe(blob, got, k)
    if found is None:
        unlink(entry)
        return None
    try:
        os.utime(entry)         # last use, for the LRU order
    except OSError:
        pass
    _used(entry)
    return found


def write(target: Path, parts: list, limit: int, folders: list[Path]) -> None:
    """Write an entry's pieces under ``target``, atomically, making room first; silently nothing when the
    entry is over the bound (``limit`` bytes over all ``folders``) or the folder cannot be written."""
    size = sum(len(p) for p in parts)
    if size > limit:
        return
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _evict(limit - size, folders)
        # A fresh temporary name, renamed into place; Ctrl-C or a failure leaves neither entry nor temporary file.
        with outputs.replacing(target) as fh:
            for p in parts:
                fh.write(p)
    except OSError:
        return
    if _usage is not None:
        _usage[str(target)] = size


def framed(header: bytes, chunks: list) -> list:
    """An entry's pieces: magic, header length, header, column bytes, and the CRC over header and columns."""
    crc = zlib.crc32(header)
    for c in chunks:
        crc = zlib.crc32(c, crc)
    return [MAGIC, struct.pack("<Q", len(header)), header, *chunks, struct.pack("<I", crc)]


def _unframe(blob: bytearray, got: int, k: tuple) -> tuple | None:
    """(column bytes, description) of an entry's bytes, or None when they are not a sound entry for ``k``."""
    start = len(MAGIC) + 8
    if got != len(blob) or got < start + 4 or blob[:len(MAGIC)] != MAGIC:
        return None
    (hlen,) = struct.unpack_from("<Q", blob, len(MAGIC))
    body = start + hlen
    if body + 4 > got:
        return None
    view = memoryview(blob)
    (crc,) = struct.unpack_from("<I", blob, got - 4)
    if zlib.crc32(view[start:got - 4]) != crc:
        return None
    try:
        stored, described, length = pickle.loads(view[start:body])
    except Exception:           # the CRC matched a header that is not ours: treat it as any damage
        return None
    if stored != k or body + length + 4 != got:
        return None
    return view[body:got - 4], described


def listing(folders: list[Path]) -> list[tuple[Path, os.stat_result]]:
    """Every file in ``folders`` (what the bound counts), with its stat; a killed writer's leftovers removed."""
    out = []
    for folder in folders:
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            p = folder / name
            try:
                st = p.stat()
            except OSError:
                continue
            if name.endswith(".tmp") and time.time() - st.st_mtime > STALE_TMP_S:
                unlink(p)         # left by a killed writer
                continue
            out.append((p, st))
    return out


# This process's view of the cache, least recently used first (path -> bytes): read from the folder once,
# then kept up to date by this process's writes and evictions, so that loading N new files stats the
# cache once rather than N times. Other processes' writes in the meantime are seen by the next process.
_usage: dict[str, int] | None = None
_usage_folders: list[Path] = []


def _evict(room: int, folders: list[Path]) -> None:
    """Remove the least recently used entries until the cache holds at most ``room`` bytes."""
    global _usage, _usage_folders
    if _usage is None or _usage_folders != folders:
        _usage_folders = list(folders)
        _usage = {str(p): st.st_size for p, st in sorted(listing(folders), key=lambda e: e[1].st_mtime_ns)}
    total = sum(_usage.values())
    for name in list(_usage):
        if total <= room:
            break
        if name.endswith(".tmp"):   # another writer's, in progress
            continue
        total -= _usage.pop(name)
        unlink(Path(name))


def _used(entry: Path) -> None:
    """``entry`` was just read: the most recently used now."""
    if _usage is not None and str(entry) in _usage:
        _usage[str(entry)] = _usage.pop(str(entry))


def forget() -> None:
    """Read the folders afresh next time (they were emptied)."""
    global _usage
    _usage = None


def unlink(p: Path) -> bool:
    try:
        os.unlink(p)
        return True
    except OSError:
        return False
