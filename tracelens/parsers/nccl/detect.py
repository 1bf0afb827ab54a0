"""Which files are NCCL debug logs, from their head: what finding the inputs needs of :mod:`.debug_log`,
without its line patterns (they are compiled on import, and a report compiles them after its workers start)."""

from __future__ import annotations

import re
from pathlib import Path

from ...model.rundir_layout import NCCL_LOGS

SNIFF_BYTES = 1 << 16                   # how much of a file's head decides whether it is an NCCL log
LOG_SUFFIXES = (".log", ".txt", ".out", ".err")   # named files that are meant as logs, NCCL or not
# NCCL's marker follows the line start, a prefix ending in "] " ("host:pid:tid [dev] ", a launcher's "[1,7]"
# or a timestamp) or a WARN's "file.cc:63 ": a document quoting log lines ("`NCCL INFO ...`") is not a log.
_HEAD_MARK = re.compile(rb"(?:^|\] |:\d+ )NCCL (?:INFO|WARN)(?: |$)|^\s*NCCL version \d", re.MULTILINE)


def maybe_log(path: Path) -> bool:
    """Whether a file found in a folder is worth sniffing: a log folder's file, or a name a text log has
    (a log suffix, ``.stdout``/``.stderr``, or none). Checkpoints and other large binaries are not read."""
    suffix = path.suffix.lower()
    return path.parent.name == NCCL_LOGS or suffix in LOG_SUFFIXES + (".stdout", ".stderr") or not suffix


def sniff(path: Path) -> str | None:
    """``"nccl"`` when the head of a file has NCCL log lines, ``"binary"`` when it holds NUL bytes, ``"empty"``
    for an empty file, else None (text without NCCL lines, or a file that cannot be read)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(SNIFF_BYTES)
    except OSError:
        return None
    if not head:
        return "empty"
    if b"\x00" in head:
        return "binary"
    return "nccl" if _HEAD_MARK.search(head) else None
