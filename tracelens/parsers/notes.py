"""One-line notes on the inputs that were left out: files that are not traces (or not NCCL logs), and links
that lead outside the folder given. Discovery says them in its error, the settled run as its first rank's
warning, the NCCL logs' reader in its notes."""

from __future__ import annotations

from pathlib import Path

from ..errors import printable


def describe_skipped(skipped: list[tuple[Path, str]], most: int = 6, what: str = "traces") -> str:
    """One line naming the files skipped, grouped by reason (at most ``most`` names); ``what``: what they
    are not (``traces``, ``NCCL logs``)."""
    by_reason: dict[str, list[str]] = {}
    for f, why in skipped:
        by_reason.setdefault(why, []).append(printable(str(f), one_line=True))
    parts = []
    for why, names in by_reason.items():
        shown = ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")
        parts.append(f"{shown} ({why})")
    one = {"traces": "a trace", "NCCL logs": "an NCCL log"}.get(what, what)
    return (f"skipped {len(skipped)} file{'s' if len(skipped) != 1 else ''} that "
            f"{f'are not {what}' if len(skipped) != 1 else f'is not {one}'}: " + "; ".join(parts))


def describe_outside(outside: list[tuple[Path, str]], most: int = 6) -> str:
    """One line naming the links left out because they lead outside the folder given."""
    shown = ", ".join(printable(f"{p} ({text})", one_line=True) for p, text in outside[:most])
    more = f" and {len(outside) - most} more" if len(outside) > most else ""
    return (f"left out {len(outside)} link{'s' if len(outside) != 1 else ''} that lead{'s' if len(outside) == 1 else ''} "
            f"outside the folder: {shown}{more} (name a file on the command line to read it)")
