"""Nsight Systems as a tool: finding ``nsys`` and turning a ``.nsys-rep`` into its SQLite export, once.

Used by the nsys parser (to read a report) and by the collector (to export what it recorded); neither
depends on the other.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from ..errors import InputError


def nsys_executable() -> str | None:
    return os.environ.get("TRACELENS_NSYS") or shutil.which("nsys")


def cached_export(report: Path) -> Path:
    """The SQLite export of a ``.nsys-rep``, made once with ``nsys export`` and reused while it is newer.

    The export goes next to the report (what ``nsys`` itself does) or, where that folder is not
    writable, into ``$XDG_CACHE_HOME/tracelens/nsys``.
    """
    sibling = report.with_suffix(".sqlite")
    cache_dir = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "tracelens" / "nsys"
    st = report.stat()
    keyed = cache_dir / f"{report.stem}-{st.st_size:x}-{int(st.st_mtime_ns):x}.sqlite"
    for candidate in (sibling, keyed):
        if candidate.is_file() and candidate.stat().st_mtime_ns >= st.st_mtime_ns:
            return candidate
    exe = nsys_executable()
    if not exe:
        raise InputError("converting a .nsys-rep needs Nsight Systems: install it (so that `nsys` is on PATH, or "
                         "set TRACELENS_NSYS=/path/to/nsys) or pass the exported .sqlite instead", path=str(report))
    target = sibling if os.access(report.parent, os.W_OK) else keyed
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp.sqlite")
    # Blobs keep NCCL's NVTX payloads (collective sizes); an nsys too old to know the option exports without.
    base, tail = [exe, "export", "--type", "sqlite"], ["--force-overwrite", "true", "--output", str(tmp), str(report)]
    try:
        proc = subprocess.run(base + ["--include-blobs", "true"] + tail, capture_output=True, text=True,
                              errors="replace")
        if proc.returncode != 0 and "include-blobs" in proc.stderr + proc.stdout:
            proc = subprocess.run(base + tail, capture_output=True, text=True, errors="replace")
    except OSError as exc:
        raise InputError(f"cannot run {exe}: {exc.strerror or exc}", path=str(report)) from None
    if proc.returncode != 0 or not tmp.is_file():
        tmp.unlink(missing_ok=True)
        last = (proc.stderr.strip() or proc.stdout.strip() or "no output").splitlines()[-1]
        raise InputError(f"`nsys export` failed (exit {proc.returncode}): {last}", path=str(report))
    os.replace(tmp, target)  # atomic: a concurrent report never reads a half-written export
    return target
