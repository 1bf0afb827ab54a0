"""Walking input folders and globs: every real file once, and never round a symlink cycle.

``glob.glob(recursive=True)`` follows symlinked folders without remembering where it has been: a link
back to a parent makes ``**`` read the same trace once per level until the path is too long (41 times on
Linux), and two such links make the walk exponential (a hang). ``Path.rglob`` on Python < 3.13 does not
follow symlinked folders at all, so a run folder reached through a link (``runs/latest``) was missed.

Here a folder is entered once per (device, inode), links included, and a file reached by two paths is
listed once, under the first path found (sorted order), so the result is the same on every machine.
"""

from __future__ import annotations

import glob as _glob
import os
import re
from pathlib import Path
from typing import Iterator


def _walk(top: Path, outside: list | None = None) -> Iterator[Path]:
    """Every file under ``top``, following symlinked folders, each real folder entered once. ``outside``:
    also leave out each link (to a file or a folder) that leads outside ``top``, listed there as (path,
    link text)."""
    seen: set[tuple[int, int]] = set()
    root = os.path.realpath(top) if outside is not None else ""
    for folder, dirs, files in os.walk(top, followlinks=True):
        try:
            st = os.stat(folder)
        except OSError:
            dirs[:] = []
            continue
        if (st.st_dev, st.st_ino) in seen:
            dirs[:] = []
            continue
        seen.add((st.st_dev, st.st_ino))
        dirs.sort()
        if outside is not None:
            dirs[:] = [d for d in dirs if _kept(Path(folder, d), root, outside)]
        for name in sorted(files):
            if outside is None or _kept(Path(folder, name), root, outside):
                yield Path(folder, name)


def _kept(path: Path, root: str, outside: list) -> bool:
    """Whether ``path`` stays inside ``root`` (a real path): anything but a link does (its folder was
    kept); a link only when what it leads to is inside."""
    if not path.is_symlink():
        return True
    real = os.path.realpath(path)
    if real == root or real.startswith(root.rstrip(os.sep) + os.sep):
        return True
    try:
        outside.append((path, "a link to " + os.readlink(path)))
    except OSError:
        outside.append((path, "a link that leads outside the folder"))
    return False


def _once(paths: Iterator[Path]) -> list[Path]:
    """``paths`` that are files, sorted, each real file once (the first path that reaches it)."""
    out: dict[tuple[int, int], Path] = {}
    for p in sorted(paths):
        try:
            st = p.stat()
        except OSError:            # a dangling link, or a file removed meanwhile
            continue
        if p.is_file():
            out.setdefault((st.st_dev, st.st_ino), p)
    return list(out.values())


def files_under(folder: Path, outside: list | None = None) -> list[Path]:
    """The files under ``folder`` (recursively, through symlinked folders), sorted, each real file once.
    ``outside``: leave out the links that lead outside ``folder`` (after every link; ``folder`` itself may
    be one), each added there as (path, link text); see docs/errors.md, "Inputs: folders, globs and links"."""
    return _once(_walk(folder, outside))


def glob_files(pattern: str) -> list[Path]:
    """The files a glob names. ``**`` matches any number of folders (symlinked ones too) without ever walking
    a cycle; patterns without it are the plain glob, which cannot loop."""
    if "**" not in pattern:
        return _once(Path(f) for f in _glob.glob(pattern))
    parts = Path(pattern).parts
    first = next(i for i, part in enumerate(parts) if any(ch in part for ch in "*?["))
    base = Path(*parts[:first]) if first else Path(".")
    rule = _compile(parts[first:])
    return _once(f for f in _walk(base) if rule.fullmatch(Path(os.path.relpath(f, base)).as_posix()))


def _compile(parts: tuple[str, ...]) -> re.Pattern:
    """The regex of glob components as ``glob`` reads them: ``**`` is zero or more folders, ``*`` and ``?`` stay
    within one name, and neither matches a name starting with a dot."""
    out = []
    for i, part in enumerate(parts):
        last = i == len(parts) - 1
        if part == "**":
            out.append(r"(?:[^/.][^/]*/)*" if not last else r"(?:[^/.][^/]*(?:/[^/.][^/]*)*)?")
            continue
        body = "".join(_piece(part))
        lead = "" if part.startswith(".") else r"(?!\.)"
        out.append(lead + body + ("" if last else "/"))
    return re.compile("".join(out))


def _piece(part: str) -> Iterator[str]:
    i = 0
    while i < len(part):
        ch = part[i]
        if ch == "*":
            yield "[^/]*"
        elif ch == "?":
            yield "[^/]"
        elif ch == "[":
            end = part.find("]", i + 2)
            if end < 0:
                yield re.escape(ch)
            else:
                inner = part[i + 1:end]
                yield "[" + ("^" + inner[1:] if inner.startswith("!") else inner).replace("\\", "\\\\") + "]"
                i = end
        else:
            yield re.escape(ch)
        i += 1
