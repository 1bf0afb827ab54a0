"""How a size is printed, in every output and every sentence (docs/metrics.md, "Units"): one place, so the
analyzers' wording and the renderers' tables agree."""

from __future__ import annotations

IEC = (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10))


def size(n: int | None) -> str:
    """Bytes in IEC units: ``25.0 MiB``, ``512 B``; ``?`` when unknown."""
    if n is None:
        return "?"
    for unit, scale in IEC:
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"
