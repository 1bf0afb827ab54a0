"""Nsight Systems as a tool: finding ``nsys`` and turning a ``.nsys-rep`` into its SQLite export, once.

Used by the nsys parser (to read a report) and by the collector (to export what it recorded); neither
depends on the other.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import subprocess
import urllib.parse
from pathlib import Path

from .. import outputs
from ..cache import root
from ..errors import EMPTY_FILE, InputError

# A table every Nsight Systems export has, whatever its version and what was traced.
_EXPORT_MARKERS = {"StringIds", "TARGET_INFO_SESSION_START_TIME", "CUPTI_ACTIVITY_KIND_KERNEL"}


def nsys_executable() -> str | None:
    return os.environ.get("TRACELENS_NSYS") or shutil.which("nsys")


def cache_dir() -> Path:
    """Where exports of ``.nsys-rep`` reports go: ``nsys/`` under the one cache root (:func:`tracelens.cache.root`)."""
    return root() / "nsys"


def export_problem(path: Path) -> str | None:
    """Why ``path`` is not a usable SQLite export (None: it is). Opened read-only and immutable: checking a
    file never changes it."""
    uri = "file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True)
        try:
            con.text_factory = lambda b: b.decode("utf-8", "replace")
            tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        finally:
            con.close()
    except (sqlite3.DatabaseError, OSError) as exc:
        return f"not a readable SQLite database ({exc})"
    if not tables & _EXPORT_MARKERS:
        return "an SQLite database without any Nsight Systems table"
    return None


def cached_export(report: Path, beside: bool = False) -> Path:
    """The SQLite export of a ``.nsys-rep``, made once with ``nsys export`` and reused while it is newer.

    An export already next to the report (``nsys`` or ``tracelens collect`` made it) is used as it is. A new
    one goes into the cache (:func:`cache_dir`), so that a report leaves the input folder untouched;
    ``beside``: next to the report instead (the collector, in the run directory it owns). An export that
    does not open as an Nsight Systems database is never cached, nor reused.
    """
    sibling = report.with_suffix(".sqlite")
    st = report.stat()
    keyed = cache_dir() / f"{report.stem}-{st.st_size:x}-{int(st.st_mtime_ns):x}.sqlite"
    for candidate in (sibling, keyed):
        if candidate.is_file() and candidate.stat().st_mtime_ns >= st.st_mtime_ns \
                and export_problem(candidate) is None:
            if candidate == keyed:
                try:
                    os.utime(candidate)     # last use: the cache's bound removes the least recently used first
                except OSError:
                    pass
            return candidate
    if st.st_size == 0:
        raise InputError(EMPTY_FILE, path=str(report))      # before asking for an nsys that could not read it
    exe = nsys_executable()
    if not exe:
        raise InputError("converting a .nsys-rep needs Nsight Systems: install it (so that `nsys` is on PATH, or "
                         "set TRACELENS_NSYS=/path/to/nsys) or pass the exported .sqlite instead", path=str(report))
    target = sibling if beside and os.access(report.parent, os.W_OK) else keyed
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        # A fresh name that nsys then overwrites (never a name someone could have put a link at beforehand).
        fd, tmp = outputs.fresh(target, suffix=".tmp.sqlite")
    except OSError as exc:
        raise InputError(f"cannot create the export cache {target.parent}: {exc.strerror or exc}",
                         path=str(report)) from None
    os.close(fd)
    # Blobs keep NCCL's NVTX payloads (collective sizes); an nsys too old to know the option exports without.
    base, tail = [exe, "export", "--type", "sqlite"], ["--force-overwrite", "true", "--output", str(tmp), str(report)]
    try:
        proc = subprocess.run(base + ["--include-blobs", "true"] + tail, capture_output=True, text=True,
                              errors="replace")
        if proc.returncode != 0 and "include-blobs" in proc.stderr + proc.stdout:
            proc = subprocess.run(base + tail, capture_output=True, text=True, errors="replace")
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot run {exe}: {exc.strerror or exc}", path=str(report)) from None
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        last = ((proc.stderr or "").strip() or (proc.stdout or "").strip() or "no output").splitlines()[-1]
        raise InputError(f"`nsys export` failed (exit {proc.returncode}): {last}", path=str(report))
    problem = export_problem(tmp)
    if problem is not None:
        tmp.unlink(missing_ok=True)
        raise InputError(f"`{exe} export` wrote no usable export ({problem}); is TRACELENS_NSYS the Nsight "
                         "Systems `nsys`?", path=str(report))
    os.replace(tmp, target)  # atomic: a concurrent report never reads a half-written export
    return target
