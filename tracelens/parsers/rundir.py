"""The side files of a ``tracelens collect`` run directory: its manifest and NCCL debug logs.

They are not traces; what they say about each rank (environment, world size, NCCL log) is attached to the
RankTraces of the traces in the same directory.
"""

from __future__ import annotations

import functools
import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from ..model.envlist import allowed_env
from ..errors import EMPTY_FILE, InputError
from ..model.rundir_layout import MANIFEST, MANIFEST_SCHEMA, REPORT, WORKERS

if TYPE_CHECKING:
    from ..model import RankTrace
    from .manifest_schema import Manifest

def is_side_file(path: Path) -> bool:
    """Files of a run directory that look like traces by name but are not, and are read (the manifest)
    or written (its report, worker records) by tracelens itself: left out without a warning. Any other
    JSON that is not a trace is recognised by its content (see :func:`tracelens.parsers.sniff_json`)."""
    if path.name == MANIFEST:
        return True
    if path.name == REPORT:
        return (path.parent / MANIFEST).is_file()
    return path.parent.name == WORKERS and (path.parent.parent / MANIFEST).is_file()


MANIFEST_MAX_BYTES = 64 << 20     # a manifest is about 1 KB a rank; more than this is not one


def inside(folder: Path, name: str) -> Path | None:
    """``folder / name`` when that leads, after every symlink, to a place inside ``folder``; else None (an
    absolute path, ``..`` out of it, a link to elsewhere, a name the system cannot resolve). A run directory
    may come from anyone: what its manifest names is never a way out of it."""
    try:
        target = (folder / name).resolve()
        if not target.is_relative_to(folder.resolve()):
            return None
        os.lstat(target)
    except FileNotFoundError:
        return folder / name        # inside, and missing: said where it is looked for
    except (OSError, ValueError, RuntimeError):     # a NUL byte, a name too long, a symlink loop
        return None
    return folder / name


@dataclass(frozen=True)
class _Read:
    """A run directory's manifest as read: ``doc`` (None: not a tracelens manifest, or its file leads
    outside the folder), the fields of the wrong type left out and the paths refused, (field, what)."""
    path: Path
    doc: Manifest | None = None
    wrong: tuple[tuple[str, str], ...] = ()
    outside: tuple[tuple[str, str], ...] = ()
    by_rank: dict = field(default_factory=dict)


def read_manifest(folder: Path) -> Manifest | None:
    """The tracelens manifest of ``folder`` (typed, its paths kept only where they stay inside the folder),
    or None where there is none. A manifest that cannot be read at all is an InputError."""
    read = _read(folder)
    return None if read is None else read.doc


def _identity(folder: Path) -> tuple | None:
    try:
        st = (folder / MANIFEST).stat()
    except (OSError, ValueError):
        return None
    return (st.st_size, st.st_mtime_ns, st.st_ino, st.st_ctime_ns, st.st_mode)


def _read(folder: Path) -> _Read | None:
    identity = _identity(folder)
    return None if identity is None else _read_once(folder, *identity)


@functools.lru_cache(maxsize=64)
def _read_once(folder: Path, size: int, *identity) -> _Read:
    """The manifest, read once per version of it (a thousand traces share one)."""
    from . import manifest_schema       # lazy: msgspec; discovery imports this module before the fork
    from ..json_text import blank       # lazy: msgspec, as for the schema above

    path = folder / MANIFEST
    if inside(folder, MANIFEST) is None:
        return _Read(path, outside=((MANIFEST, _link_text(path)),))
    if not stat.S_ISREG(identity[-1]):
        raise InputError("not a readable manifest: not a regular file", path=str(path))
    if size > MANIFEST_MAX_BYTES:
        raise InputError(f"not a readable manifest: larger than {MANIFEST_MAX_BYTES >> 20} MiB", path=str(path))
    try:
        with open(path, "rb") as fh:
            data = fh.read(MANIFEST_MAX_BYTES + 1)
    except OSError as exc:
        raise InputError(f"not a readable manifest: {exc.strerror or exc}", path=str(path)) from None
    if len(data) > MANIFEST_MAX_BYTES:
        raise InputError(f"not a readable manifest: larger than {MANIFEST_MAX_BYTES >> 20} MiB", path=str(path))
    try:
        doc, wrong = manifest_schema.decode(data)
    except manifest_schema.Unusable as exc:
        why = EMPTY_FILE if blank(data) else exc
        raise InputError(f"not a readable manifest: {why}", path=str(path)) from None
    if doc is None or not isinstance(doc.schema, str) or doc.schema.split("/")[0] != MANIFEST_SCHEMA.split("/")[0]:
        return _Read(path)          # another program's manifest.json: not ours to read
    outside: list[tuple[str, str]] = []
    doc.nccl_logs = _confined(folder, doc.nccl_logs, "nccl_logs", outside)
    by_rank = {}
    for i, entry in enumerate(doc.ranks or ()):
        for name in manifest_schema.RankEntry.PATHS:
            value = getattr(entry, name)
            if value is not None and inside(folder, value) is None:
                outside.append((f"ranks[{i}].{name}", value))
                setattr(entry, name, None)
        if entry.rank is not None:
            by_rank.setdefault(entry.rank, entry)
    return _Read(path, doc, tuple(wrong), tuple(outside), by_rank)


def _confined(folder: Path, paths, where: str, outside: list) -> list | None:
    if paths is None:
        return None
    kept = []
    for i, value in enumerate(paths):
        if inside(folder, value) is None:
            outside.append((f"{where}[{i}]", value))
        else:
            kept.append(value)
    return kept


def _link_text(path: Path) -> str:
    try:
        return "a link to " + os.readlink(path)
    except (OSError, ValueError):
        return "a path that leads outside the folder"


def stamp(folder: Path) -> tuple:
    """What a trace's analysis in ``folder`` depends on besides the trace (for the warm cache's key): the
    manifest's identity, and the size of every NCCL log it names (None where absent)."""
    identity = _identity(folder)
    if identity is None:
        return ()
    sizes = []
    for log in named_logs(folder):
        try:
            sizes.append((log, (folder / log).stat().st_size))
        except OSError:
            sizes.append((log, None))
    return (*identity, tuple(sizes))


def named_logs(folder: Path) -> tuple[str, ...]:
    """The NCCL logs the manifest of ``folder`` names for its ranks (relative to it, each inside it); none
    without a manifest."""
    m = read_manifest(folder)
    return tuple(sorted({r.nccl_log for r in (m.ranks or ()) if r.nccl_log})) if m else ()


def notes(folders, links=()) -> list[tuple[str, int, str]]:
    """The run-level warnings (code, count, message) about the manifests of ``folders``: fields of the wrong
    type left out, paths refused because they lead outside the run folder; and ``links``, (path, link text)
    found in a folder given as input that lead outside it (:func:`.walk.files_under`), not read either."""
    wrong, outside = {}, {}
    for folder in dict.fromkeys(Path(f) for f in folders):
        read = _read(folder)
        if read is not None:
            if read.wrong:
                wrong[str(read.path)] = [f"{name} ({why})" for name, why in read.wrong]
            if read.outside:
                outside[str(read.path)] = [f"{name} = {_shown(value)}" if name != MANIFEST else value
                                           for name, value in read.outside]
    for path, text in links:
        outside[str(path)] = [text]
    out = []
    if wrong:
        out.append(("manifest-wrong-type", sum(map(len, wrong.values())), "fields of the wrong type in a run "
                    "directory's manifest, read as absent: " + _listed(wrong)))
    if outside:
        out.append(("outside-run-folder", sum(map(len, outside.values())), "not opened: paths in a run folder "
                    "that lead outside it (name a file on the command line to read it): " + _listed(outside)))
    return out


def _shown(value: str, most: int = 120) -> str:
    return json.dumps(value if len(value) <= most else value[:most] + "...")


def _listed(by_file: dict[str, list[str]], most: int = 6) -> str:
    """``file: item, item; file: item``, at most ``most`` items in all, then how many more."""
    parts, shown = [], 0
    for path, items in by_file.items():
        if shown < most:
            parts.append(f"{path}: " + ", ".join(items[:most - shown]))
        shown += len(items)
    return "; ".join(parts) + (f"; and {shown - most} more" if shown > most else "")


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
    for t in traces:
        folder = Path(t.meta.source).parent
        read = _read(folder)
        if read is None or read.doc is None or t.meta.rank is None:
            continue
        m, entry = read.doc, read.by_rank.get(t.meta.rank)
        if not t.meta.env:
            t.meta.env = allowed_env((entry.env if entry else None) or m.env or {})
        if not t.meta.command:
            t.meta.command = command_settings(m.command or m.argv or [])
        if t.meta.world_size is None and m.world_size:
            t.meta.world_size = m.world_size
        if entry is not None:
            t.meta.host = t.meta.host or entry.host
            t.meta.cpus = t.meta.cpus or entry.cpus
        log = entry.nccl_log if entry else None     # inside the folder (see _read_once)
        try:
            if log and (folder / log).is_file():
                t.meta.side_files.append({"path": str(folder / log), "format": "nccl-log",
                                          "bytes": (folder / log).stat().st_size})
        except OSError:
            continue
