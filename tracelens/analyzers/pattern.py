"""The overlap pattern of each step: sawtooth, two-phase, serialized, partial or no-comm.

Features per step window (docs/metrics.md, "Overlap pattern"), with C and K the rank's comm and compute
sets clipped to the window:

- the *compute phase* runs from the first compute to where the step's exposed communication tail begins:
  the start of an exposed piece of ``C ∖ K`` after which more communication is exposed than compute runs
  before the last communication ends (the one where that margin is largest); without such a point it ends
  with the last communication;
- ``tail_fraction``: the share of ``len(C)`` at or after the compute phase end;
- ``bursts``: runs of communication separated by compute;
- ``first_comm_offset``: where the first communication started, as a fraction of the compute phase.

The rule is applied in order: no communication → ``no-comm``; tail ≥ two_phase_min_tail → ``two-phase``;
overlap ≥ sawtooth_min_overlap_pct → ``sawtooth``; overlap ≤ serialized_max_overlap_pct with at least
serialized_min_bursts bursts → ``serialized``; anything else → ``partial``.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np
import pandas as pd

from ..report import Diagnosis, PatternEvidence, ratio
from . import intervals as iv
from .thresholds import Thresholds

PATTERNS = ("sawtooth", "two-phase", "serialized", "partial", "no-comm")
# When steps split evenly, the rank takes the worse pattern.
_WORST_FIRST = ("two-phase", "serialized", "partial", "sawtooth", "no-comm")


def features(compute: iv.IntervalSet, comm: iv.IntervalSet, lo: int, hi: int,
             comm_starts: np.ndarray, ops: list) -> PatternEvidence:
    """The evidence for one window; ``comm_starts``/``ops`` describe the comm activities starting in it."""
    c, k = iv.clip(comm, lo, hi), iv.clip(compute, lo, hi)
    comm_ns = iv.length(c)
    op = Counter(o for o in ops if isinstance(o, str)).most_common(1)
    op = op[0][0] if op else None
    first_comm = int(c[0][0]) if c[0].size else None
    compute_start = int(k[0][0]) if k[0].size else None
    if comm_ns == 0:
        return PatternEvidence(comm_kernels=int(comm_starts.size), bursts=0, started_during_compute=0,
                               compute_start_ns=compute_start, compute_phase_end_ns=None, first_comm_ns=first_comm,
                               first_comm_offset=None, tail_ns=0, tail_fraction=None, op=op)
    phase_end = _compute_phase_end(c, k)
    tail = int(iv.length_in(c, [phase_end], [hi])[0])
    offset = None
    if compute_start is not None and phase_end > compute_start:
        offset = round((first_comm - compute_start) / (phase_end - compute_start), 4)
    return PatternEvidence(
        comm_kernels=int(comm_starts.size), bursts=_bursts(c, k),
        started_during_compute=int((comm_starts < phase_end).sum()) if compute_start is not None else 0,
        compute_start_ns=compute_start, compute_phase_end_ns=phase_end, first_comm_ns=first_comm,
        first_comm_offset=offset, tail_ns=tail, tail_fraction=ratio(tail, comm_ns), op=op)


def _gaps_with_compute(s: np.ndarray, e: np.ndarray, k: iv.IntervalSet) -> np.ndarray:
    """For consecutive members of a set: does compute run in the gap between member i and i+1?"""
    return iv.length_in(k, e[:-1], s[1:]) > 0


def _compute_phase_end(c: iv.IntervalSet, k: iv.IntervalSet) -> int:
    """Where the step's exposed communication tail begins (the last comm end when there is none).

    Candidates are the starts of exposed pieces; the tail begins at the candidate p with the most
    ``exposed comm after p − compute after p (until the last comm ends)``, when that is positive. Compute
    between p and the end of communication means the compute phase was still going on, so a short exposed
    gap mid-step, or comm interleaved between compute kernels, does not open the tail; compute overlapping
    only the very end of the tail (an optimizer starting under gloo bookkeeping) does not close it.
    """
    exposed = iv.subtract(c, k)
    comm_end = int(c[1][-1])
    p = exposed[0]
    if p.size == 0:
        return comm_end
    exposed_after = np.cumsum((exposed[1] - exposed[0])[::-1])[::-1]
    compute_after = iv.length_in(k, p, np.full(p.size, comm_end))
    score = exposed_after - compute_after
    best = int(np.argmax(score))
    return int(p[best]) if score[best] > 0 else comm_end


def _bursts(c: iv.IntervalSet, k: iv.IntervalSet) -> int:
    return 1 + int(_gaps_with_compute(c[0], c[1], k).sum())


def classify(ev: PatternEvidence, overlap_pct: float | None, th: Thresholds) -> str:
    if ev.tail_fraction is None or overlap_pct is None:
        return "no-comm"
    if ev.tail_fraction >= th.two_phase_min_tail:
        return "two-phase"
    if overlap_pct >= th.sawtooth_min_overlap_pct:
        return "sawtooth"
    if overlap_pct <= th.serialized_max_overlap_pct and ev.bursts >= th.serialized_min_bursts:
        return "serialized"
    return "partial"


def majority(patterns: list[str]) -> str | None:
    """The most common pattern, ties going to the worse one; steps without comm count only if all lack it."""
    with_comm = [p for p in patterns if p != "no-comm"] or patterns
    if not with_comm:
        return None
    counts = Counter(with_comm)
    top = max(counts.values())
    return next(p for p in _WORST_FIRST if counts.get(p) == top)


def diagnose(rank: int, step: int | None, pattern: str, ev: PatternEvidence, m, mode: str,
             th: Thresholds) -> Diagnosis | None:
    """The overlap-pattern entry of one step (``m``: its StepMetrics); None for steps without comm."""
    if pattern == "no-comm":
        return None
    what = _plural(ev.op, ev.comm_kernels, mode)
    hidden = f"{m.overlap_pct:.0f} %" if m.overlap_pct is not None else "none"
    exposed_ms = f"{m.exposed_comm_ns / 1e6:.1f} ms"
    where = "the main thread is computing" if mode == "cpu" else "compute is still running"
    last = "the main thread's last compute" if mode == "cpu" else "the last compute kernel"
    tail_pct = f"{100 * (ev.tail_fraction or 0):.0f} %"
    if pattern == "sawtooth":
        title = "sawtooth: communication overlaps compute"
        detail = f"{ev.started_during_compute} of {what} start while {where}; {hidden} of their time is hidden"
        advice = "" if not m.exposed_comm_ns else \
            f"{exposed_ms} still exposed at the end of the step: smaller last bucket or earlier launch"
    elif pattern == "two-phase":
        title = "two-phase: communication waits for all compute"
        lead = "all communication starts" if ev.started_during_compute == 0 else f"{tail_pct} of communication runs"
        detail = f"{lead} after {last}; {exposed_ms} exposed ({hidden} hidden)"
        advice = ("check bucket_cap_mb (one bucket larger than the model), no_sync with a final all-reduce, "
                  "or a sync before the optimizer")
    elif pattern == "serialized":
        title = "serialized: communication between compute, never alongside it"
        detail = (f"{what} run in {ev.bursts} bursts between compute but only {hidden} of their time is hidden; "
                  f"{exposed_ms} exposed")
        advice = ("run collectives on their own stream (not the compute stream) and check launch order "
                  "(CUDA_DEVICE_MAX_CONNECTIONS)") if mode == "gpu" else \
            "check that collectives are issued asynchronously (async_op=True / DDP hooks)"
    else:
        title = "partial overlap"
        detail = f"{hidden} of communication is hidden and {tail_pct} runs after the compute phase; {exposed_ms} exposed"
        advice = "smaller or earlier buckets; launch collectives before the compute they can hide behind"
    severity = "info" if pattern == "sawtooth" else (
        "critical" if (m.exposed_comm_fraction or 0) >= th.critical_exposed_fraction else "warning")
    evidence = {"pattern": pattern, "overlap_pct": m.overlap_pct, "exposed_comm_ns": m.exposed_comm_ns,
                "exposed_comm_fraction": m.exposed_comm_fraction, **msgspec.structs.asdict(ev)}
    return Diagnosis(id="overlap-pattern", severity=severity, rank=rank, step=step, title=title, detail=detail,
                     advice=advice, evidence=evidence)



def _plural(op: str | None, n: int, mode: str) -> str:
    noun = {"all_reduce": "all-reduce", "allreduce": "all-reduce", "all_gather": "all-gather",
            "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "broadcast": "broadcast",
            "send_recv": "send/recv"}.get(op or "", "comm kernel" if mode == "gpu" else "collective")
    return f"{n} {noun}{'' if n == 1 else 's'}"


def step_patterns(sets, windows, overlap_pct: list, exposure: pd.DataFrame, th: Thresholds):
    """(pattern, evidence) for every window; comm activities come from the collective exposure table."""
    starts = exposure["start_ns"].to_numpy()
    ops = exposure["op"].to_numpy(dtype=object)
    order = np.argsort(starts, kind="stable")
    starts, ops = starts[order], ops[order]
    out = []
    for lo, hi, pct in zip(windows.start.tolist(), windows.end.tolist(), overlap_pct):
        a, b = np.searchsorted(starts, [lo, hi])
        ev = features(sets.compute, sets.comm, lo, hi, starts[a:b], ops[a:b].tolist())
        out.append((classify(ev, pct, th), ev))
    return out
