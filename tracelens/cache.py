"""The warm cache, two layers per trace file, so that a second report of an unchanged file neither decodes nor
analyses it again, and one per report, so that a second report of unchanged inputs does nothing but render:

- ``tables/``: the file's parsed RankTraces (tables, metadata, the file's warnings): parser output, read by
  :func:`tracelens.api.load` (and the dashboard's step timeline) and by a report whose analysis entry is
  missing;
- ``analyses/``: what a report keeps of the file once analysed (the executors' Parts: each rank's metadata
  and :class:`~tracelens.analyzers.RankAnalysis`), for the same file analysed with the same thresholds,
  patterns and run-directory side files. Combining the ranks and the cross-rank analyses run again;
- ``reports/``: the Report of a whole set of inputs (the analysis key of every trace file in input order, the
  NCCL logs named among the inputs, the files skipped, the thresholds): a repeated report of the same inputs
  is read back as it was combined, whatever its output format, and needs neither numpy nor any analyzer.

One root for everything tracelens caches (:func:`root`): ``$TRACELENS_CACHE``, else
``$XDG_CACHE_HOME/tracelens``, else ``~/.cache/tracelens``. Besides the three layers, ``nsys/`` holds the SQLite
exports of ``.nsys-rep`` reports (:mod:`tracelens.tools.nsys_export`). All count towards one bound
(``TRACELENS_CACHE_MAX``, default 2 GiB); the least recently used go first.

An entry is one file, written to a temporary name and renamed into place (a concurrent report or a Ctrl-C
never leaves half an entry under the real name), laid out as (a Report entry has no columns: its header is the key and the Report, msgpack-encoded)::

    MAGIC (8 bytes) | header length (8) | header (pickle) | column bytes, 64-byte aligned | CRC-32 (4)

The header repeats the whole key and gives every column's dtype, offset and length (an analysis entry has
no columns: its header is the key and the Parts); the CRC covers header and columns. An entry whose magic,
length, key or CRC does not match is a miss: it is removed and the file parsed again. Entries are pickles,
read only from the user's own cache folder, after the CRC check.

A file modified within the last RACY_S seconds is not cached: file systems stamp mtimes with a coarse
clock, and a file rewritten at the same size within one tick would otherwise keep its old entry ("racy
git"). A cache folder that cannot be written (read-only, full) means no cache, silently: the report is the
same either way, and it must not depend on the state of the cache.

Neither numpy nor pandas is imported at module level (the CLI imports this module for ``tracelens cache``).
"""

from __future__ import annotations

import functools
import os
import pickle
import re
import struct
import time
import zlib
from pathlib import Path

from . import _version
from .errors import UsageError

try:        # BLAKE2b from its own C module (see _digest)
    from _blake2 import blake2b
except ImportError:         # pragma: no cover - CPython builds it unless told not to
    from hashlib import blake2b

CACHE_ENV = "TRACELENS_CACHE"
NO_CACHE_ENV = "TRACELENS_NO_CACHE"
MAX_ENV = "TRACELENS_CACHE_MAX"
DEFAULT_MAX = 2 << 30
MAGIC = b"TLCACHE2"            # the last digit is the layout's version: a new layout never reads an old one
SUFFIX = ".tlc"
RACY_S = 2.0
# Temporary files older than this are left over from a killed writer (a live one renames within seconds).
STALE_TMP_S = 3600
_ALIGN = 64
_SIZE = re.compile(r"(\d+)\s*([kmgt]?)i?b?", re.IGNORECASE)


def root() -> Path:
    """The folder every tracelens cache lives under (the nsys exports too)."""
    named = os.environ.get(CACHE_ENV, "").strip()
    if named:
        return Path(named).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    # The XDG spec: a relative XDG_CACHE_HOME is invalid and ignored.
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "tracelens"


def tables_dir() -> Path:
    return root() / "tables"


def analyses_dir() -> Path:
    return root() / "analyses"


def reports_dir() -> Path:
    return root() / "reports"


def enabled(flag: bool | None = None) -> bool:
    """``flag`` when given (``--no-cache`` passes False), else on unless ``TRACELENS_NO_CACHE`` is set (to
    anything but 0 or empty)."""
    if flag is not None:
        return flag
    return os.environ.get(NO_CACHE_ENV, "").strip() in ("", "0")


def max_bytes() -> int:
    """The bound on the cache's size: ``TRACELENS_CACHE_MAX`` (bytes, or with a K/M/G/T suffix; 0: cache
    nothing) or 2 GiB. A value that is not a size is a usage error."""
    value = os.environ.get(MAX_ENV, "").strip()
    if not value:
        return DEFAULT_MAX
    m = _SIZE.fullmatch(value)
    if not m:
        raise UsageError(f"{MAX_ENV} must be a size in bytes (e.g. 2G, 500M or 0 for none), not {value!r}")
    return int(m.group(1)) << (10 * " kmgt".index(m.group(2).lower() or " "))


# --------------------------------------------------------------------------------------------- the key

@functools.lru_cache(maxsize=1)
def _analysis_stamp() -> tuple:
    """What identifies the analysing code: every module of the package, by name, size and mtime."""
    here = os.path.dirname(os.path.abspath(__file__))
    stamp = []
    # os.scandir, not Path.rglob: the same files several times faster (a first report pays it once).
    folders = [here]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for e in entries:
            if e.name.endswith(".py"):
                try:
                    st = e.stat()
                except OSError:
                    continue
                stamp.append((os.path.relpath(e.path, here).replace(os.sep, "/"), st.st_size, st.st_mtime_ns))
            elif e.is_dir(follow_symlinks=False) and e.name != "__pycache__":
                folders.append(e.path)
    return tuple(sorted(stamp))


@functools.lru_cache(maxsize=1)
def _code_stamp() -> tuple:
    """What identifies the parsing code: the version, and each parser module's size and mtime (an edited
    checkout parses differently under the same version number)."""
    here = Path(__file__).parent
    files = sorted((here / "parsers").rglob("*.py")) + sorted((here / "model").rglob("*.py")) + [here / "_speed.py"]
    stamp = []
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        stamp.append((f.relative_to(here).as_posix(), st.st_size, st.st_mtime_ns))
    return (_version.__version__, tuple(stamp))


def key(path: Path, options: tuple) -> tuple | None:
    """The cache key of ``path`` parsed with ``options`` (anything that changes parsing); None when the file
    must not be cached (unreadable, or modified too recently to tell a rewrite from its first version)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time() - st.st_mtime_ns / 1e9 < RACY_S:
        return None
    # The inode and ctime too: a copy that keeps the mtime (cp -p, shutil.copy2) over an older file changes them.
    return (str(path), os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, _code_stamp(),
            tuple(options))


def analysis_key(path: Path, options: tuple) -> tuple | None:
    """The key of ``path``'s analysis entry: its table key (``options``: all that changes the analysis too)
    and every module of the package."""
    k = key(path, options)
    return None if k is None else (*k, _analysis_stamp())


def file_stamp(path: Path) -> tuple | None:
    """A side input's identity as a trace file's key has it (the Report layer's NCCL logs); None when it
    cannot be told apart from a rewrite (unreadable, or modified in the last RACY_S seconds)."""
    k = key(path, ())
    return None if k is None else k[:6]


def report_key(analysis_keys: list, others: tuple) -> tuple | None:
    """The key of a Report entry: every trace file's analysis key, in input order (None among them: not
    cached), and ``others``, all else the Report depends on (NCCL logs, skipped files, thresholds)."""
    if not analysis_keys or any(k is None for k in analysis_keys):
        return None
    # What every file's key shares (the package's code stamps, the thresholds, the options) once, not per file:
    # the key is written out whole to name the entry, and a thousand copies of the code stamps are slow.
    # Lossless: the positions shared are part of the key.
    first = analysis_keys[0]
    shared = tuple(i for i in range(len(first)) if all(len(k) == len(first) and k[i] == first[i]
                                                     for k in analysis_keys))
    own = tuple(tuple(x for i, x in enumerate(k) if i not in shared) for k in analysis_keys)
    return ("report/2", shared, tuple(first[i] for i in shared), own, others)


def entry_path(k: tuple, folder: Path | None = None) -> Path:
    return (folder or tables_dir()) / (_digest(repr(k).encode()) + SUFFIX)


def _digest(data: bytes) -> str:
    """40 hex digits naming an entry: BLAKE2b from its own C module, since ``import hashlib`` loads OpenSSL
    into every report; hashlib where that module is missing."""
    return blake2b(data, digest_size=20).hexdigest()


def has(path: Path, options: tuple) -> bool:
    """Whether an entry exists for ``path`` (not whether it is sound: :func:`get` checks that)."""
    k = key(path, options)
    return k is not None and entry_path(k).is_file()


def has_analysis(path: Path, options: tuple) -> bool:
    k = analysis_key(path, options)
    return k is not None and entry_path(k, analyses_dir()).is_file()


# ------------------------------------------------------------------------------------------ read, write

def get(path: Path, options: tuple, k: tuple | None = None):
    """The RankTraces cached for ``path``, or None (no entry, or one that is stale or damaged: removed).
    ``k``: its key, when the caller has it already."""
    k = k or key(path, options)
    if k is None:
        return None
    found = _read(entry_path(k), k)
    return None if found is None else _traces(*found)


def put(path: Path, options: tuple, traces, before: tuple | None = None) -> None:
    """Cache ``traces`` for ``path``; ``before``: its key before it was parsed (a file that changed while it
    was parsed is not cached). Never raises for want of room or permission: no cache then."""
    k = key(path, options)
    if k is None or (before is not None and k != before):
        return
    parts = _encode(k, traces)
    if parts is not None:
        _write(entry_path(k), parts)


def get_analysis(path: Path, options: tuple, k: tuple | None = None) -> list | None:
    """The Parts cached for ``path`` analysed under ``options`` (:func:`analysis_key`), or None."""
    k = k or analysis_key(path, options)
    if k is None:
        return None
    found = _read(entry_path(k, analyses_dir()), k)
    return None if found is None else found[1]


def put_analysis(path: Path, options: tuple, parts: list, before: tuple | None = None) -> None:
    """Cache the Parts of ``path`` (pickled now: the caller may change them after)."""
    k = analysis_key(path, options)
    if k is None or (before is not None and k != before):
        return
    try:
        header = pickle.dumps((k, parts, 0), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception:       # something unpicklable in a trace's metadata: not cached, the report is the same
        return
    _write(entry_path(k, analyses_dir()), _framed(header, []))


def get_report(k: tuple):
    """The Report cached under ``k`` (:func:`report_key`), or None."""
    found = _read(entry_path(k, reports_dir()), k)
    if found is None:
        return None
    # lazy: msgspec and the contract; this module loads before the report's workers fork
    import msgspec

    from .contract import Report

    try:
        return msgspec.msgpack.decode(found[1], type=Report)
    except (msgspec.DecodeError, msgspec.ValidationError, TypeError):      # of another version: rebuilt
        _unlink(entry_path(k, reports_dir()))
        return None


def put_report(k: tuple, report) -> None:
    import msgspec      # lazy: as in get_report

    header = pickle.dumps((k, msgspec.msgpack.encode(report), 0), protocol=pickle.HIGHEST_PROTOCOL)
    _write(entry_path(k, reports_dir()), _framed(header, []))


def _read(entry: Path, k: tuple) -> tuple | None:
    """(the column bytes, the header's description) of a sound entry for key ``k``; a damaged or stale one
    is removed."""
    try:
        with open(entry, "rb") as fh:
            blob = bytearray(os.fstat(fh.fileno()).st_size)
            got = fh.readinto(blob)
    except OSError:
        return None
    found = _decode(blob, got, k)
    if found is None:
        _unlink(entry)
        return None
    try:
        os.utime(entry)         # last use, for the LRU order
    except OSError:
        pass
    _used(entry)
    return found


def _write(target: Path, parts: list) -> None:
    """Write an entry's pieces under ``target``, atomically, making room first; silently nothing when the
    entry is over the bound or the folder cannot be written."""
    size = sum(len(p) for p in parts)
    limit = max_bytes()
    if size > limit:
        return
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{time.monotonic_ns():x}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        _evict(limit - size)
        with open(tmp, "wb") as fh:
            for p in parts:
                fh.write(p)
        os.replace(tmp, target)
    except OSError:
        _unlink(tmp)
        return
    except BaseException:     # Ctrl-C while writing: no entry, and no temporary file left either
        _unlink(tmp)
        raise
    if _usage is not None:
        _usage[str(target)] = size


def _encode(k: tuple, traces) -> list | None:
    """The entry's pieces (bytes-like), or None when a table holds something this layout does not keep."""
    # lazy: numpy and the model: a warm Report needs neither, and this module loads before the fork
    import numpy as np

    from .model.columns import factorize
    from .model.table import Labels

    chunks: list = []
    offset = 0

    def add(arr: np.ndarray) -> tuple:
        nonlocal offset
        arr = np.ascontiguousarray(arr)
        pad = -offset % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        chunks.append(memoryview(arr).cast("B") if arr.size else b"")
        spec = (arr.dtype.str, offset, arr.nbytes)
        offset += arr.nbytes
        return spec

    described = []
    for t in traces:
        tables = {}
        for name in ("device_ops", "host_ops", "collectives", "steps", "threads"):
            frame = getattr(t, name)
            cols = []
            for c, col in frame.items():
                if isinstance(col, Labels):
                    cats = col.categories.tolist()
                    if any(type(v) is not str for v in cats):
                        return None
                    cols.append((c, "category", add(col.codes), cats, False))
                    continue
                dtype = col.dtype
                if dtype == object:
                    # Codes over the distinct strings, -1 for None: exact (a NaN would not be, so such a
                    # column is not cached), and small.
                    arr = col
                    codes, uniques = factorize(arr)
                    values = uniques
                    missing = arr[codes == -1]
                    if any(type(v) is not str for v in values) or not (missing == None).all():  # noqa: E711
                        return None
                    cols.append((c, "object", add(codes.astype(np.int32)), values, None))
                elif isinstance(dtype, np.dtype) and dtype.kind in "iufb":
                    cols.append((c, "array", add(col), None, None))
                else:
                    return None
            tables[name] = cols
        described.append((t.meta, tables))
    header = pickle.dumps((k, described, offset), protocol=pickle.HIGHEST_PROTOCOL)
    return _framed(header, chunks)


def _framed(header: bytes, chunks: list) -> list:
    """An entry's pieces: magic, header length, header, column bytes, and the CRC over header and columns."""
    crc = zlib.crc32(header)
    for c in chunks:
        crc = zlib.crc32(c, crc)
    return [MAGIC, struct.pack("<Q", len(header)), header, *chunks, struct.pack("<I", crc)]


def _decode(blob: bytearray, got: int, k: tuple) -> tuple | None:
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


def _traces(data: memoryview, described) -> list:
    # lazy: as in _encode
    import numpy as np

    from .model import RankTrace
    from .model.table import Labels, Table

    def array(spec) -> np.ndarray:
        dtype, offset, nbytes = spec
        dt = np.dtype(dtype)
        return np.frombuffer(data, dt, nbytes // dt.itemsize, offset)

    out = []
    for meta, tables in described:
        frames = {}
        for name, cols in tables.items():
            built = {}
            for c, kind, spec, values, ordered in cols:
                if kind == "category":
                    built[c] = Labels(array(spec), values)
                elif kind == "object":
                    built[c] = np.array(values + [None], dtype=object)[array(spec)]   # code -1: the None
                else:
                    built[c] = array(spec)
            frames[name] = Table(built)
        out.append(RankTrace(meta=meta, **frames))
    return out


# ------------------------------------------------------------------------------------- size and clearing

def _entries() -> list[tuple[Path, os.stat_result]]:
    """Every file the bound counts (table entries and nsys exports), with its stat."""
    out = []
    for folder in (tables_dir(), analyses_dir(), reports_dir(), root() / "nsys"):
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
                _unlink(p)         # left by a killed writer
                continue
            out.append((p, st))
    return out


# This process's view of the cache, least recently used first (path -> bytes): read from the folder once,
# then kept up to date by this process's writes and evictions, so that loading N new files stats the
# cache once rather than N times. Other processes' writes in the meantime are seen by the next process.
_usage: dict[str, int] | None = None


def _evict(room: int) -> None:
    """Remove the least recently used entries until the cache holds at most ``room`` bytes."""
    global _usage
    if _usage is None or _usage_root != str(root()):
        _remember_root()
        _usage = {str(p): st.st_size for p, st in sorted(_entries(), key=lambda e: e[1].st_mtime_ns)}
    total = sum(_usage.values())
    for name in list(_usage):
        if total <= room:
            break
        if name.endswith(".tmp"):   # another writer's, in progress
            continue
        total -= _usage.pop(name)
        _unlink(Path(name))


_usage_root = ""


def _remember_root() -> None:
    global _usage_root
    _usage_root = str(root())


def _used(entry: Path) -> None:
    """``entry`` was just read: the most recently used now."""
    if _usage is not None and str(entry) in _usage:
        _usage[str(entry)] = _usage.pop(str(entry))


def info() -> dict:
    """Where the cache is and what it holds: location, bound, entries and bytes (table entries, analysis
    entries, Report entries and nsys exports), and whether it is switched off in this environment."""
    every = _entries()
    tables = [(p, st) for p, st in every if p.parent.name == "tables" and p.name.endswith(SUFFIX)]
    analyses = [(p, st) for p, st in every if p.parent.name == "analyses" and p.name.endswith(SUFFIX)]
    reports = [(p, st) for p, st in every if p.parent.name == "reports" and p.name.endswith(SUFFIX)]
    nsys = [(p, st) for p, st in every if p.parent.name == "nsys" and p.name.endswith(".sqlite")]
    return {"location": str(root()), "max_bytes": max_bytes(), "enabled": enabled(),
            "entries": len(tables), "bytes": sum(st.st_size for _, st in tables),
            "analyses": len(analyses), "analyses_bytes": sum(st.st_size for _, st in analyses),
            "reports": len(reports), "reports_bytes": sum(st.st_size for _, st in reports),
            "nsys_exports": len(nsys), "nsys_bytes": sum(st.st_size for _, st in nsys)}


def clear() -> tuple[int, int]:
    """Remove every table entry, analysis entry, Report entry and nsys export (and leftover temporary files); (files,
    bytes) removed."""
    global _usage
    _usage = None
    files = size = 0
    for p, st in _entries():
        if _unlink(p):
            files += 1
            size += st.st_size
    return files, size


def _unlink(p: Path) -> bool:
    try:
        os.unlink(p)
        return True
    except OSError:
        return False
