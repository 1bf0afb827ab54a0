"""Formatting shared by the human-readable renderers (numbers only; no metric is computed here)."""

from __future__ import annotations

from dataclasses import dataclass

from ..report import SEVERITIES, Collective, Report


def ms(ns: int | None) -> str:
    return "—" if ns is None else f"{ns / 1e6:,.3f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def frac(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def size(n: int | None) -> str:
    if n is None:
        return "?"
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def step_label(step: int | None) -> str:
    return "all" if step is None else str(step)


def most_exposed(report: Report, top: int) -> list[Collective]:
    ranked = sorted(report.collectives, key=lambda c: (-c.exposed_ns, c.rank, c.start_ns))
    return [c for c in ranked[:top] if c.exposed_ns > 0]


def short(name: str, width: int = 60) -> str:
    name = name.removeprefix("void ")
    return name if len(name) <= width else name[: width - 1] + "…"


STEP_HEADERS = ("step", "duration ms", "compute ms", "comm ms", "overlap ms", "exposed comm ms", "idle ms",
                "overlap %", "exposed frac", "pattern")


def step_cells(s) -> list[str]:
    label = step_label(s.step) + ("" if getattr(s, "complete", True) else " (cut)")
    return [label, ms(s.duration_ns), ms(s.compute_ns), ms(s.comm_ns), ms(s.overlap_ns), ms(s.exposed_comm_ns),
            ms(s.idle_ns), pct(s.overlap_pct), frac(s.exposed_comm_fraction), s.pattern or ""]


def total_cells(t) -> list[str]:
    return ["total", ms(t.duration_ns), ms(t.compute_ns), ms(t.comm_ns), ms(t.overlap_ns), ms(t.exposed_comm_ns),
            ms(t.idle_ns), pct(t.overlap_pct), frac(t.exposed_comm_fraction), ""]


def rank_title(r) -> str:
    where = f"GPU {r.device}" if r.device is not None else "CPU"
    name = f" ({r.device_name})" if r.device_name else ""
    world = f"/{r.world_size}" if r.world_size else ""
    return f"rank {r.rank}{world} · {where}{name} · {r.source}"


@dataclass
class Finding:
    """Diagnoses with the same rank, id and verdict, shown once with the steps they cover."""

    rank: int
    id: str
    severity: str
    title: str
    steps: list
    detail: str
    advice: str


def findings(report: Report) -> list[Finding]:
    """Group the report's diagnoses for display; the most severe member supplies the detail."""
    groups: dict[tuple, list] = {}
    for d in report.diagnoses:
        groups.setdefault((d.rank, d.id, d.title), []).append(d)
    out = []
    for (rank, id_, title), ds in groups.items():
        worst = max(ds, key=lambda d: SEVERITIES.index(d.severity) if d.severity in SEVERITIES else 0)
        out.append(Finding(rank, id_, worst.severity, title, [d.step for d in ds], worst.detail, worst.advice))
    return out


def steps_label(steps: list) -> str:
    """``step 3``, ``steps 2–4`` (consecutive) or ``steps 2, 5, 7``; ``whole trace`` without steps."""
    nums = sorted(s for s in steps if s is not None)
    if not nums:
        return "whole trace"
    if len(nums) == 1:
        return f"step {nums[0]}"
    if nums == list(range(nums[0], nums[-1] + 1)):
        return f"steps {nums[0]}–{nums[-1]}"
    return "steps " + ", ".join(map(str, nums))
