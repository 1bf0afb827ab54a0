"""The warm cache: four layers, so that a second report of an unchanged file neither decodes nor analyses it
again, and a second report of unchanged inputs does nothing but render (or, rendered the same way before,
not even that). Each is a :class:`Layer` with the same four calls (``key``, ``has``, ``get``, ``put``), used
by one stage each:

- ``TABLES``: a file's parsed RankTraces (parser output), by :func:`tracelens.parsers.parse_file`: for
  ``load`` and for a report whose analysis entry is missing;
- ``ANALYSES``: what a report keeps of a file once analysed (its Parts), by
  :func:`tracelens.pipeline.analyze_file`, for the same file analysed with the same thresholds, patterns
  and run-directory side files; combining runs again;
- ``REPORTS``: the Report of a whole set of inputs, by :func:`tracelens.pipeline.report`: read back as it
  was combined, whatever the output format, with neither numpy nor any analyzer imported;
- ``RENDERS``: a Report's text or Markdown, by :func:`tracelens.pipeline.report` when asked for a view: read
  back without the contract or rich.

One root for everything tracelens caches (:func:`root`): ``$TRACELENS_CACHE``, else
``$XDG_CACHE_HOME/tracelens``, else ``~/.cache/tracelens``; ``nsys/`` beside the layers holds the SQLite
exports of ``.nsys-rep`` reports (:mod:`tracelens.tools.nsys_export`). All count towards one bound
(``TRACELENS_CACHE_MAX``, default 2 GiB); the least recently used go first.

An entry is one file, written to a temporary name and renamed into place (a concurrent report or a Ctrl-C
never leaves half an entry under the real name)::

    MAGIC (8 bytes) | header length (8) | header (pickle) | column bytes, 64-byte aligned | CRC-32 (4)

The header repeats the whole key (a hash collision reads as a miss) and, for tables, describes every column
(:mod:`tracelens.cache_tables`); the analysis and report layers keep their value in the header, no columns.
The CRC covers header and columns. An entry whose magic, length, key or CRC does not match is a miss: it is
removed and the file read again. Entries are pickles, read only from the user's own cache folder, after the
CRC check.

A report with no file workers (one file, or one core busy) writes a file's tables entry from a forked pool
worker while it analyses the file (:func:`writes_beside`), and waits for it before it combines: the entry is
the same, and a Ctrl-C (which reaches the writer too) leaves no entry, as above.

A file modified within the last RACY_S seconds is not cached: file systems stamp mtimes with a coarse clock,
and a file rewritten at the same size within one tick would otherwise keep its old entry ("racy git"). A
cache folder that cannot be written (read-only, full) means no cache, silently: the report is the same
either way, and it must not depend on the state of the cache.
"""

from __future__ import annotations

import contextlib
import functools
import os
import pickle
import re
import time
from pathlib import Path

from . import _version, cache_files
from .errors import UsageError

CACHE_ENV = "TRACELENS_CACHE"
NO_CACHE_ENV = "TRACELENS_NO_CACHE"
MAX_ENV = "TRACELENS_CACHE_MAX"
DEFAULT_MAX = 2 << 30
SUFFIX = ".tlc"
RACY_S = 2.0
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
    # os.scandir, not Path.rglob: the same files in 1 ms instead of 3-4 (a first report pays it once).
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


def _file_key(path: Path, options: tuple) -> tuple | None:
    """The identity of ``path`` as read with ``options``; None when the file must not be cached (unreadable,
    or modified too recently to tell a rewrite from its first version)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    if time.time() - st.st_mtime_ns / 1e9 < RACY_S:
        return None
    # The inode and ctime too: a copy that keeps the mtime (cp -p, shutil.copy2) over an older file changes them.
    return (str(path), os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, _code_stamp(),
            tuple(options))


_OPTIONS_AT = 7             # where a file key holds its options


def file_stamp(path: Path) -> tuple | None:
    """A side input's identity as a trace file's key has it (the Report layer's NCCL logs); None when it
    cannot be told apart from a rewrite (unreadable, or modified in the last RACY_S seconds)."""
    k = _file_key(path, ())
    return None if k is None else k[:6]


def _digest(data: bytes) -> str:
    """40 hex digits naming an entry: BLAKE2b from its own C module, since ``import hashlib`` loads OpenSSL
    (3-5 ms of every report); hashlib where that module is missing."""
    try:
        from _blake2 import blake2b  # lazy: the first entry named, and before hashlib's OpenSSL
    except ImportError:         # pragma: no cover - CPython builds it unless told not to
        from hashlib import blake2b  # lazy: only where _blake2 is missing
    return blake2b(data, digest_size=20).hexdigest()


# --------------------------------------------------------------------------------------------- the layers

class Layer:
    """One layer of the cache: its entries under ``root()/<folder>``, each named by its key. The same four
    calls on every layer: :meth:`key` (None: not to be cached), :meth:`has`, :meth:`get` (None: a miss; a
    stale or damaged entry is removed) and :meth:`put` (silently nothing where it cannot be written)."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def path(self) -> Path:
        return root() / self.folder

    def entry(self, k: tuple) -> Path:
        return self.path() / (_digest(repr(k).encode()) + SUFFIX)

    def key(self, *args) -> tuple | None:
        raise NotImplementedError

    def has(self, k: tuple | None) -> bool:
        """Whether an entry exists for ``k`` (not whether it is sound: :meth:`get` checks that)."""
        return k is not None and self.entry(k).is_file()

    def get(self, k: tuple):
        found = cache_files.read(self.entry(k), k)
        if found is None:
            return None
        value = self._decode(*found)
        if value is None:           # of another version: rebuilt
            cache_files.unlink(self.entry(k))
        return value

    def put(self, k: tuple, value) -> None:
        if not self._still(k):
            return
        if _beside and _beside[0] == os.getpid() and _write_beside(self, k, value):
            return
        self._write(k, value)

    def _write(self, k: tuple, value) -> None:
        framed = self._encode(k, value)
        if framed is not None:
            cache_files.write(self.entry(k), framed, max_bytes(), _folders())

    def _still(self, k: tuple) -> bool:
        """Whether what ``k`` was made from is unchanged now (a file that changed while read: not cached)."""
        return True

    def _encode(self, k: tuple, value) -> list | None:
        """An entry's pieces: its key and the value pickled in the header, no columns."""
        try:
            header = pickle.dumps((k, value, 0), protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:       # something unpicklable in a trace's metadata: not cached, the report is the same
            return None
        return cache_files.framed(header, [])

    def _decode(self, data: memoryview, described):
        return described


class _FileLayer(Layer):
    def key(self, path: Path, options: tuple) -> tuple | None:
        return _file_key(path, options)

    def _still(self, k: tuple) -> bool:
        return self.key(Path(k[0]), k[_OPTIONS_AT]) == k


class _Tables(_FileLayer):
    """A trace file's parsed RankTraces, keyed by the file, the parse options and the parsing code."""

    def _encode(self, k: tuple, traces) -> list | None:
        # lazy: numpy and the model, on a cold parse only (the CLI imports this module for `tracelens cache`)
        from . import cache_tables

        found = cache_tables.encode(traces)
        if found is None:
            return None
        described, chunks, length = found
        return cache_files.framed(pickle.dumps((k, described, length), protocol=pickle.HIGHEST_PROTOCOL), chunks)

    def _decode(self, data: memoryview, described):
        # lazy: numpy and the model, on a hit only
        from . import cache_tables

        return cache_tables.decode(data, described)


class _Analyses(_FileLayer):
    """What a report keeps of a file once analysed (its Parts), keyed by the file, everything that changes
    the analysis (thresholds, patterns, the run directory's side files) and every module of the package."""

    def key(self, path: Path, options: tuple) -> tuple | None:
        k = _file_key(path, options)
        return None if k is None else (*k, _analysis_stamp())


class _Reports(Layer):
    """The Report of a whole set of inputs, msgpack-encoded."""

    def key(self, analysis_keys: list, others: tuple) -> tuple | None:
        """Every trace file's analysis key, in input order (None among them: not cached), and ``others``, all
        else the Report depends on (NCCL logs, skipped files, thresholds)."""
        if not analysis_keys or any(k is None for k in analysis_keys):
            return None
        # What every file's key shares (the package's code stamps, the thresholds, the options) once, not per
        # file: the key is written out whole to name the entry, and a thousand copies of the code stamps cost
        # 0.2 s. Lossless: the positions shared are part of the key.
        first = analysis_keys[0]
        shared = tuple(i for i in range(len(first)) if all(len(k) == len(first) and k[i] == first[i]
                                                         for k in analysis_keys))
        own = tuple(tuple(x for i, x in enumerate(k) if i not in shared) for k in analysis_keys)
        return ("report/2", shared, tuple(first[i] for i in shared), own, others)

    def _encode(self, k: tuple, report) -> list:
        # lazy: msgspec, on a report's first run only
        import msgspec

        return super()._encode(k, msgspec.msgpack.encode(report))

    def _decode(self, data: memoryview, described):
        # lazy: msgspec and the contract, on a hit only
        import msgspec

        from .contract import Report  # lazy: msgspec's types, on a hit only

        try:
            return msgspec.msgpack.decode(described, type=Report)
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError):
            return None


# ---------------------------------------------------------------------------------- writes beside the report

# While writes_beside() is open: [the pid that opened it, the pools writing]. A report's biggest entry, a
# file's tables, is encoded and written by a forked pool worker while this process analyses the file
# (bench/RESULTS.md, "The cache off the critical path"); the worker shares the tables with this process
# through the fork, so nothing is pickled to it.
_beside: list = []


@contextlib.contextmanager
def writes_beside(enabled: bool = True):
    """Within it, this process's tables entries are written by a forked worker, beside the rest of its work
    (when ``enabled``: a report whose other cores are not already reading files); on leaving, it waits for
    every such write to end (a report is over once its entries are written)."""
    if _beside or not enabled:      # nested (a report inside a report's callback): the outer one waits
        yield
        return
    _beside[:] = [os.getpid()]
    try:
        yield
    finally:
        writers, _beside[:] = _beside[1:], []
        for writer in writers:
            writer.answer(0)
            writer.close()


def _write_beside(layer: Layer, k: tuple, value) -> bool:
    """Start ``layer``'s write of ``value`` in a forked worker; False where none can be forked (the caller
    writes it)."""
    if not isinstance(layer, _Tables):
        return False
    # lazy: the pool, only on a report's first reading of a file
    from . import pool

    if not pool.can_fork() or pool.cores() < 2:
        return False
    writer = pool.Pool(1, 1, functools.partial(_write_job, layer, k, value), fork=True)
    if not writer.workers:
        return False
    writer.start(None)
    _beside.append(writer)
    return True


def _write_job(layer: Layer, k: tuple, value, setup, i: int) -> None:
    layer._write(k, value)


class _Renders(Layer):
    """A Report's rendering (text or Markdown), keyed by the Report's key and everything the rendering
    depends on besides (:func:`tracelens.renderers.view_key`): a repeated report of unchanged inputs, rendered
    the same way, imports neither the contract nor rich."""

    def key(self, report_key: tuple | None, view_key: tuple | None) -> tuple | None:
        if report_key is None or view_key is None:
            return None
        return ("render/1", report_key, view_key)

    def _decode(self, data: memoryview, described):
        return described if isinstance(described, str) else None


TABLES = _Tables("tables")
ANALYSES = _Analyses("analyses")
REPORTS = _Reports("reports")
RENDERS = _Renders("renders")
LAYERS = (TABLES, ANALYSES, REPORTS, RENDERS)


def _folders() -> list[Path]:
    """Every folder the bound counts: the layers' and the nsys exports'."""
    return [*(layer.path() for layer in LAYERS), root() / "nsys"]


# ------------------------------------------------------------------------------------- size and clearing

def info() -> dict:
    """Where the cache is and what it holds: location, bound, entries and bytes (table entries, analysis
    entries, Report entries, rendered reports and nsys exports), and whether it is switched off in this
    environment."""
    every = cache_files.listing(_folders())
    tables = [(p, st) for p, st in every if p.parent.name == "tables" and p.name.endswith(SUFFIX)]
    analyses = [(p, st) for p, st in every if p.parent.name == "analyses" and p.name.endswith(SUFFIX)]
    reports = [(p, st) for p, st in every if p.parent.name == "reports" and p.name.endswith(SUFFIX)]
    renders = [(p, st) for p, st in every if p.parent.name == "renders" and p.name.endswith(SUFFIX)]
    nsys = [(p, st) for p, st in every if p.parent.name == "nsys" and p.name.endswith(".sqlite")]
    return {"location": str(root()), "max_bytes": max_bytes(), "enabled": enabled(),
            "entries": len(tables), "bytes": sum(st.st_size for _, st in tables),
            "analyses": len(analyses), "analyses_bytes": sum(st.st_size for _, st in analyses),
            "reports": len(reports), "reports_bytes": sum(st.st_size for _, st in reports),
            "renders": len(renders), "renders_bytes": sum(st.st_size for _, st in renders),
            "nsys_exports": len(nsys), "nsys_bytes": sum(st.st_size for _, st in nsys)}


def clear() -> tuple[int, int]:
    """Remove every table entry, analysis entry, Report entry, rendered report and nsys export (and leftover
    temporary files); (files, bytes) removed."""
    cache_files.forget()
    files = size = 0
    for p, st in cache_files.listing(_folders()):
        if cache_files.unlink(p):
            files += 1
            size += st.st_size
    return files, size


