"""What every sentence module of the wording shares: the finding it words, and how a time, a share, a
collective and a kernel are printed (as the report's tables print them, so a sentence and its table agree)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ...units import kernel_name, size  # noqa: F401 - sizes and kernel names as every table prints them


@dataclass
class Finding:
    """What an analyzer found: a Diagnosis without its sentences.

    ``verdict`` names which sentences an id with several uses (the overlap pattern, a sync stall's kind, a
    straggler's slower time); it is not part of the report, whose evidence already holds what decided it."""

    id: str
    severity: str
    rank: int
    step: Optional[int]
    verdict: Optional[str]
    evidence: dict


def ms(ns: int) -> str:
    """A time as the report's tables print it: ms with three decimals."""
    return f"{ns / 1e6:.3f} ms"


def pct(value: float | None) -> str:
    """A share as the report's tables print it: one decimal."""
    return "none" if value is None else f"{value:.1f} %"


def verb(n: int) -> str:
    """The verb for a count: one collective starts, two start."""
    return "starts" if n == 1 else "start"


NOUNS = {"all_reduce": "all-reduce", "allreduce": "all-reduce", "all_gather": "all-gather",
         "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "broadcast": "broadcast",
         "send_recv": "send/recv"}


def noun(op: str | None, n: int, mode: str) -> str:
    name = NOUNS.get(op or "", "comm kernel" if mode == "gpu" else "collective")
    return f"{name}{'' if n == 1 else 's'}"


def sizes_label(lo: int, hi: int) -> str:
    """``25.0 MiB``, or ``1.0 MiB-4.0 MiB``: the sizes a kind of collective had."""
    return size(lo) if lo == hi else f"{size(lo)}-{size(hi)}"


def ranks_label(ranks: list[int], total: int | None = None) -> str:
    """``ranks 0–2, 4–6``, ``rank 3``; past six ranges, ``12 of 16 ranks`` (``total``: of how many)."""
    if not ranks:
        return "no rank"
    spans, lo = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            spans.append(str(lo) if lo == a else f"{lo}–{a}")
            lo = b
    if len(spans) > 6:
        return f"{len(ranks)} of {total} ranks" if total else f"{len(ranks)} ranks"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)


def hosts_label(hosts: list[str]) -> str:
    """``on host a``, ``between hosts a and b``, ``across 6 hosts (a, b, c, d and 2 more)``: where a link is."""
    if len(hosts) == 1:
        return f"on host {hosts[0]}"
    if len(hosts) == 2:
        return f"between hosts {hosts[0]} and {hosts[1]}"
    listed = ", ".join(hosts[:4]) + (f" and {len(hosts) - 4} more" if len(hosts) > 4 else "")
    return f"across {len(hosts)} hosts ({listed})"


def comm_label(ev: dict) -> str:
    """``communicator 0xp2 (pair2)``: a slow-link finding's communicator, by id and name where known."""
    return f"communicator {ev['comm']}" + (f" ({ev['comm_name']})" if ev["comm_name"] else "")
