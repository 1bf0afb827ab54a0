"""The side files of a ``tracelens collect`` run directory: its manifest and NCCL debug logs.

They are not traces; what they say about each rank (environment, world size, NCCL log) is attached to the
RankTraces of the traces in the same directory.
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

from ..envlist import allowed_env
from ..rundir_layout import MANIFEST, MANIFEST_SCHEMA, REPORT, WORKERS

if TYPE_CHECKING:
    from ..model import RankTrace

def is_side_file(path: Path) -> bool:
    """Files of a run directory that look like traces by name but are not, and are read (the manifest)
    or written (its report, worker records) by tracelens itself: left out without a warning. Any other
    JSON that is not a trace is recognised by its content (see :func:`tracelens.parsers.sniff_json`)."""
    if path.name == MANIFEST:
        return True
    if path.name == REPORT:
        return (path.parent / MANIFEST).is_file()
    return path.parent.name == WORKERS and (path.parent.parent / MANIFEST).is_file()


def read_manifest(folder: Path) -> dict | None:
    path = folder / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and str(doc.get("schema", "")).split("/")[0] == MANIFEST_SCHEMA.split("/")[0] else None


def stamp(folder: Path) -> tuple:
    """What a trace's analysis in ``folder`` depends on besides the trace (for the warm cache's key): the
    manifest's identity, and the size of every NCCL log it names (None where absent)."""
    path = folder / MANIFEST
    try:
        st = path.stat()
    except OSError:
        return ()
    identity = (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)
    sizes = []
    for log in _named_logs(folder, *identity):
        try:
            sizes.append((log, (folder / log).stat().st_size))
        except OSError:
            sizes.append((log, None))
    return (*identity, tuple(sizes))


def named_logs(folder: Path) -> tuple[str, ...]:
    """The NCCL logs the manifest of ``folder`` names (relative to it); none without a manifest."""
    try:
        st = (folder / MANIFEST).stat()
    except OSError:
        return ()
    return _named_logs(folder, st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns)


@functools.lru_cache(maxsize=64)
def _named_logs(folder: Path, *identity) -> tuple[str, ...]:
    """The NCCL logs a manifest names, read once per version of it (a thousand traces share one)."""
    m = read_manifest(folder)
    return tuple(sorted({str(r.get("nccl_log")) for r in (m or {}).get("ranks", [])
                         if isinstance(r, dict) and r.get("nccl_log")}))


_BUCKET_CAP = re.compile(r"--?bucket[-_]cap[-_]mb(?:=(.*))?$", re.IGNORECASE)


def command_settings(command) -> dict[str, str]:
    """Settings a command line states: a training script's ``--bucket-cap-mb X`` (or ``--bucket_cap_mb=X``)."""
    out: dict[str, str] = {}
    if not isinstance(command, list):
        return out
    words = [str(w) for w in command]
    for i, word in enumerate(words):
        m = _BUCKET_CAP.match(word)
        if m:
            value = m.group(1) if m.group(1) is not None else (words[i + 1] if i + 1 < len(words) else None)
            if value is not None:
                out["bucket_cap_mb"] = value
    return out


def attach(traces: list[RankTrace]) -> None:
    """Fill each trace's environment, world size and NCCL log from its directory's manifest, where the trace
    itself did not record them."""
    manifests: dict[Path, dict | None] = {}
    for t in traces:
        folder = Path(t.meta.source).parent
        if folder not in manifests:
            manifests[folder] = read_manifest(folder)
        m = manifests[folder]
        if m is None or t.meta.rank is None:
            continue
        entry = next((r for r in m.get("ranks", []) if r.get("rank") == t.meta.rank), {})
        if not t.meta.env:
            t.meta.env = allowed_env(entry.get("env") or m.get("env") or {})
        if not t.meta.command:
            t.meta.command = command_settings(m.get("command") or m.get("argv") or [])
        if t.meta.world_size is None and m.get("world_size"):
            t.meta.world_size = int(m["world_size"])
        log = entry.get("nccl_log")
        if log and (folder / log).is_file():
            t.meta.side_files.append({"path": str(folder / log), "format": "nccl-log",
                                      "bytes": (folder / log).stat().st_size})
