"""The overlap patterns, and the majority vote that gives a rank its pattern from its steps' and the run its
pattern from its ranks': shared by the rank and the run analyzers, and light (no tables)."""

from __future__ import annotations

from collections import Counter

from ..contract import MIXED

PATTERNS = ("sawtooth", "two-phase", "backlog", "serialized", "partial", "no-comm")


def majority(patterns: list[str | None]) -> tuple[str | None, dict[str, int]]:
    """The pattern held by a strict majority of the members with communication, else ``mixed``; and the
    count of each pattern. Members without communication (``no-comm``) count only when none has any; members
    without a pattern (nothing to overlap, None) are not counted."""
    counts = Counter(p for p in patterns if p is not None)
    with_comm = {p: n for p, n in counts.items() if p != "no-comm"}
    if not with_comm:
        return ("no-comm" if counts else None), dict(counts)
    top, n = max(with_comm.items(), key=lambda kv: kv[1])
    return (top if 2 * n > sum(with_comm.values()) else MIXED), dict(counts)
