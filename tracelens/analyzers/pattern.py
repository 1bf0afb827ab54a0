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
    lo, hi = np.asarray(windows.start, dtype=np.int64), np.asarray(windows.end, dtype=np.int64)
    a, b = np.searchsorted(starts, lo), np.searchsorted(starts, hi)
    evidence = step_features(sets.compute, sets.comm, lo, hi, starts, a, b)
    out = []
    for ev, i, j, pct in zip(evidence, a.tolist(), b.tolist(), overlap_pct):
        top = Counter(o for o in ops[i:j].tolist() if isinstance(o, str)).most_common(1)
        ev.op = top[0][0] if top else None
        out.append((classify(ev, pct, th), ev))
    return out


def step_features(compute: iv.IntervalSet, comm: iv.IntervalSet, lo: np.ndarray, hi: np.ndarray,
                  comm_starts: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[PatternEvidence]:
    """The evidence of every window at once (``op`` left unset); the comm activities starting in window k
    are ``comm_starts[a[k]:b[k]]``. Windows are sorted and disjoint, as step windows are.

    With C and K the comm and compute sets clipped to a window, and ``C ∖ K`` its exposed pieces:
    ``compute_after(p) = |K ∩ [p, end of C)|`` and ``exposed_after(p)`` the exposed length from piece p on;
    the compute phase ends at the first piece with the largest positive ``exposed_after − compute_after``,
    else at the end of C. Clipping commutes with the set operations, so they run once on the whole run.
    """
    n = lo.size
    cw, cs, ce = iv.clip_many(comm, lo, hi)
    kw, ks, _ = iv.clip_many(compute, lo, hi)
    comm_ns = np.zeros(n, dtype=np.int64)
    np.add.at(comm_ns, cw, ce - cs)
    c_first, c_last = _segment_ends(cw, n)
    k_first, _ = _segment_ends(kw, n)
    comm_end = np.where(c_last >= 0, ce[np.maximum(c_last, 0)] if ce.size else 0, 0)

    # Compute phase end: per exposed piece, exposed comm after it minus compute after it.
    xw, xs, xe = iv.clip_many(iv.subtract(comm, compute), lo, hi)
    length = xe - xs
    cum = np.cumsum(length)
    x_first, _ = _segment_ends(xw, n)
    before = np.where(x_first > 0, cum[np.maximum(x_first - 1, 0)] if cum.size else 0, 0)  # up to each window
    total = np.zeros(n, dtype=np.int64)
    np.add.at(total, xw, length)
    exposed_after = total[xw] - (cum - length - before[xw])
    score = exposed_after - iv.length_in(compute, xs, comm_end[xw])
    best = np.full(n, -1, dtype=np.int64)
    if score.size:
        top = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(top, xw, score)
        hit = np.flatnonzero(score == top[xw])
        windows_hit, first_hit = np.unique(xw[hit], return_index=True)
        best[windows_hit] = hit[first_hit]
        best[(best >= 0) & (top <= 0)] = -1
    phase_end = np.where(best >= 0, xs[np.maximum(best, 0)] if xs.size else 0, comm_end)
    tail = iv.length_in(comm, np.minimum(phase_end, hi), hi)

    # Bursts: consecutive comm members of a window with compute in the gap between them.
    gaps = np.zeros(n, dtype=np.int64)
    if cw.size > 1:
        same = cw[1:] == cw[:-1]
        busy = iv.length_in(compute, ce[:-1][same], cs[1:][same]) > 0
        np.add.at(gaps, cw[1:][same][busy], 1)
    started = np.searchsorted(comm_starts, phase_end, side="left") - a

    out = []
    for w in range(n):
        compute_start = int(ks[k_first[w]]) if k_first[w] >= 0 else None
        kernels = int(b[w] - a[w])
        if comm_ns[w] == 0:
            out.append(PatternEvidence(comm_kernels=kernels, bursts=0, started_during_compute=0,
                                       compute_start_ns=compute_start, compute_phase_end_ns=None,
                                       first_comm_ns=None, first_comm_offset=None, tail_ns=0, tail_fraction=None))
            continue
        first_comm, end = int(cs[c_first[w]]), int(phase_end[w])
        offset = None
        if compute_start is not None and end > compute_start:
            offset = round((first_comm - compute_start) / (end - compute_start), 4)
        out.append(PatternEvidence(
            comm_kernels=kernels, bursts=1 + int(gaps[w]),
            started_during_compute=int(started[w]) if compute_start is not None else 0,
            compute_start_ns=compute_start, compute_phase_end_ns=end, first_comm_ns=first_comm,
            first_comm_offset=offset, tail_ns=int(tail[w]), tail_fraction=ratio(int(tail[w]), int(comm_ns[w]))))
    return out


def _segment_ends(window: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """First and last position of each window's members in a grouped array (-1 for a window without any)."""
    first = np.searchsorted(window, np.arange(n), side="left")
    last = np.searchsorted(window, np.arange(n), side="right") - 1
    empty = last < first
    return np.where(empty, -1, first), np.where(empty, -1, last)
