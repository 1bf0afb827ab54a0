"""The overlap pattern of each step: sawtooth, two-phase, backlog, serialized, partial or no-comm.

Features per step window (docs/metrics.md, "Overlap pattern"), with C and K the rank's comm and compute
sets clipped to the window:

- the *compute phase* runs from the first compute to where the step's exposed communication tail begins:
  the start of an exposed piece of ``C ∖ K`` after which more communication is exposed than compute runs
  before the last communication ends (the one where that margin is largest), among the pieces before which
  at least half of the step's compute ran (the phase is where the compute is); without such a point it ends
  with the last communication;
- ``tail_fraction``: the share of ``len(C)`` at or after the compute phase end;
- ``bursts``: runs of communication separated by compute;
- ``first_comm_offset``: where the first communication started, as a fraction of the compute phase;
- ``comm_on_compute_stream``: the share of comm activity time on a stream that also ran compute in the step;
- ``ops``: the step's collectives per operation;
- a collective's *issue* is when the host asked for it (its kernel's launch call; on CPU-only runs the
  ``c10d::*`` call that queued it); one is *issued during compute* when compute issued later ran in the
  compute phase (a compute kernel launched after it, or on CPU a main-thread op started after it);
  ``tail_collectives`` start at or after the compute phase end, ``issued_during_compute`` of them were
  issued during compute and ``queued`` of those started late (more than launch_prompt_ns after their issue)
  the moment an earlier collective ended; ``backlog_ns``: the tail's time of collectives issued during
  compute.

Comm and compute *take turns* when overlap ≤ serialized_max_overlap_pct with at least serialized_min_bursts
bursts. The rule is applied in order: no communication → ``no-comm``; no compute → no pattern (nothing to
overlap); sharing the compute stream (≥ serialized_min_shared_fraction) and taking turns → ``serialized``;
tail ≥ two_phase_min_tail → ``backlog`` when more than half of the tail is backlog and a collective of it
queued, else ``partial`` when more than half of the tail is collectives issued during compute (held up
after, not issued late), else ``two-phase``; overlap ≥ sawtooth_min_overlap_pct → ``sawtooth``; taking turns →
``serialized``; anything else → ``backlog`` on the same condition, else ``partial``. A rank's pattern is a
strict majority of its steps', else ``mixed``.
"""

from __future__ import annotations

from collections import Counter

import msgspec
import numpy as np

from ...model.columns import isin, matches
from ...model.linking import main_thread
from ...contract import PatternEvidence, ratio
from ...model.table import Table
from .. import intervals as iv
from ..thresholds import Thresholds, material as _material
from ..wording import Finding

from ..verdicts import MIXED, PATTERNS, majority  # noqa: F401  (where a rank's pattern is decided too)
from .context import RankContext


def classify(ev: PatternEvidence, overlap_pct: float | None, th: Thresholds) -> str | None:
    """The step's pattern; None when it has communication but no compute (nothing to overlap)."""
    if ev.tail_fraction is None or overlap_pct is None:
        return "no-comm"
    if ev.compute_start_ns is None:
        return None
    takes_turns = overlap_pct <= th.serialized_max_overlap_pct and ev.bursts >= th.serialized_min_bursts
    # On one stream nothing can overlap: comm sharing the compute stream and taking turns with it is
    # serialized whatever its tail looks like (a large last piece would otherwise read as two-phase).
    if takes_turns and (ev.comm_on_compute_stream or 0) >= th.serialized_min_shared_fraction:
        return "serialized"
    # Collectives issued during compute, queued behind earlier ones, making most of the tail: throughput-
    # bound, not issued late (a two-phase or partial shape with this cause is a backlog).
    backlog = bool(ev.queued) and 2 * (ev.backlog_ns or 0) > ev.tail_ns
    if ev.tail_fraction >= th.two_phase_min_tail:
        if backlog:
            return "backlog"
        # Communication that waits for the end of compute was issued at its end: a tail most of whose time
        # is collectives issued while compute ran is held up by something else (a busy worker, a blocked
        # training thread, a stream dependency), which bucket settings do not move.
        if 2 * (ev.backlog_ns or 0) > ev.tail_ns:
            return "partial"
        return "two-phase"
    if overlap_pct >= th.sawtooth_min_overlap_pct:
        return "sawtooth"
    if takes_turns:
        return "serialized"
    return "backlog" if backlog else "partial"


def analyze(ctx: RankContext, blind: bool) -> tuple[list[tuple[str | None, PatternEvidence]], list[Finding]]:
    """The (pattern, evidence) of every step window and the steps' overlap-pattern findings. ``blind``: a
    CPU-only trace of a run whose NCCL ran on a GPU the profiler did not record, where a step without
    communication has no pattern rather than "no-comm"."""
    patterns, found = [], []
    for m, (pattern, evidence) in zip(ctx.steps, step_patterns(ctx)):
        if blind and m.comm_ns == 0:
            pattern = None
        patterns.append((pattern, evidence))
        f = diagnose(ctx, m, pattern, evidence)
        if f is not None:
            found.append(f)
    return patterns, found


def diagnose(ctx: RankContext, m, pattern: str | None, ev: PatternEvidence) -> Finding | None:
    """The overlap-pattern finding of one step (``m``: its StepMetrics); None for steps without comm.

    Its evidence holds every number its sentences state (analyzers/wording/exposure.py words it) and what decided
    the verdict; the serialized verdict says whether the shared-stream rule (rule 3) decided."""
    if pattern == "no-comm" or m.comm_ns == 0:
        return None
    th = ctx.thresholds
    verdict = "nothing-to-overlap" if pattern is None else pattern
    if pattern == "serialized" and (ev.comm_on_compute_stream or 0) >= th.serialized_min_shared_fraction:
        verdict = "serialized-on-compute-stream"
    material = _material(th, m.exposed_comm_ns, m.duration_ns)
    if pattern in ("sawtooth", None) or not material:
        severity = "info"
    else:
        severity = "critical" if (m.exposed_comm_fraction or 0) >= th.critical_exposed_fraction else "warning"
    evidence = {"pattern": pattern, "mode": ctx.sets.mode, "program": ctx.program, "overlap_pct": m.overlap_pct,
                "comm_ns": m.comm_ns,
                "exposed_comm_ns": m.exposed_comm_ns, "exposed_comm_fraction": m.exposed_comm_fraction,
                "duration_ns": m.duration_ns, "impact_ns": m.exposed_comm_ns, "material": material,
                **msgspec.structs.asdict(ev)}
    return Finding(id="overlap-pattern", severity=severity, rank=ctx.rank, step=m.step, verdict=verdict,
                   evidence=evidence)


def step_patterns(ctx: RankContext) -> list[tuple[str | None, PatternEvidence]]:
    """(pattern, evidence) for every window; comm activities come from the collective exposure table."""
    trace, sets, windows, exposure, th = ctx.trace, ctx.sets, ctx.windows, ctx.exposure, ctx.thresholds
    overlap_pct = [s.overlap_pct for s in ctx.steps]
    starts = exposure["start_ns"]
    ends = starts + exposure["duration_ns"]
    ops = np.asarray(exposure["op"], dtype=object)
    issued = issue_times(trace, sets, exposure)
    order = np.argsort(starts, kind="stable")
    starts, ends, ops, issued = starts[order], ends[order], ops[order], issued[order]
    lo, hi = np.asarray(windows.start, dtype=np.int64), np.asarray(windows.end, dtype=np.int64)
    a, b = np.searchsorted(starts, lo), np.searchsorted(starts, hi)
    evidence = step_features(sets.compute, sets.comm, lo, hi, starts, a, b)
    shared = shared_stream_fraction(trace, sets.device, lo, hi) if sets.mode == "gpu" else [None] * lo.size
    k_start, k_issue = compute_issues(trace, sets)
    blocked = iv.length_in(collective_calls(trace), lo, hi).tolist() if sets.mode == "cpu" else [None] * lo.size
    out = []
    for ev, i, j, pct, sh, h, bl in zip(evidence, a.tolist(), b.tolist(), overlap_pct, shared, hi.tolist(), blocked):
        ev.blocked_ns = None if bl is None else int(bl)
        counts = Counter(o for o in ops[i:j].tolist() if isinstance(o, str))
        ev.op = counts.most_common(1)[0][0] if counts else None
        ev.ops = dict(counts.most_common()) if counts else None
        ev.comm_on_compute_stream = sh
        if ev.compute_phase_end_ns is not None and ev.compute_start_ns is not None:
            _backlog(ev, starts[i:j], ends[i:j], issued[i:j], k_start, k_issue, h, th)
        out.append((classify(ev, pct, th), ev))
    return out


def issue_times(trace, sets, exposure: Table) -> np.ndarray:
    """Per exposure row, when the host issued the collective (-1 when unknown): the start of its kernel's
    launch call; on CPU-only runs the start of the main thread's ``c10d::*`` call that queued it, paired in
    order (gloo runs a process group's collectives in the order they were queued)."""
    host = trace.host_ops
    n = len(exposure["start_ns"])
    out = np.full(n, -1, dtype=np.int64)
    if not n or not len(host):
        return out
    if sets.mode == "gpu":
        launch = trace.device_ops["launch_idx"][exposure["device_idx"]]
        known = launch >= 0
        out[known] = host["start_ns"][launch[known]]
        return out
    outer = _outer_collective_calls(host)
    if outer is None:
        return out
    calls = np.sort(host["start_ns"][outer])
    order = np.argsort(exposure["start_ns"], kind="stable")
    k = 0
    for row, start in zip(order.tolist(), exposure["start_ns"][order].tolist()):
        if k < calls.size and calls[k] <= start:
            out[row] = calls[k]
            k += 1
    return out


def _outer_collective_calls(host):
    """The main thread's outermost ``c10d::*`` calls (a mask over the host table), or None without one."""
    main = main_thread(host)
    if main is None:
        return None
    parent = host["parent"]
    c10d = (host["pid"] == main[0]) & (host["tid"] == main[1]) & matches(host["name"], r"c10d::")
    return c10d & ~np.where(parent >= 0, c10d[np.maximum(parent, 0)], False)


def collective_calls(trace) -> iv.IntervalSet:
    """When the training thread was inside a collective call: on CPU-only runs gloo's calls return once the
    work is queued, so time inside them is the thread held up (a full queue, a busy worker, a contended core)."""
    host = trace.host_ops
    outer = _outer_collective_calls(host) if len(host) else None
    if outer is None or not outer.any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    return iv.union(np.asarray(host["start_ns"][outer], np.int64), np.asarray(host["end_ns"][outer], np.int64))


def compute_issues(trace, sets) -> tuple[np.ndarray, np.ndarray]:
    """The compute, as (start, issue) pairs sorted by start: on a device its kernels and their launch calls'
    starts (the smallest int64 when the launch is not in the trace: issued before everything), on CPU-only
    runs the main thread's compute pieces, issued where they start."""
    if sets.mode != "gpu":
        return sets.compute[0], sets.compute[0]
    ops, host = trace.device_ops, trace.host_ops
    rows = np.flatnonzero((ops["device"] == sets.device) & isin(ops["kind"], ("compute",)))
    rows = rows[np.argsort(ops["start_ns"][rows], kind="stable")]
    launch = ops["launch_idx"][rows]
    issue = np.full(rows.size, np.iinfo(np.int64).min, dtype=np.int64)
    if len(host):
        issue[launch >= 0] = host["start_ns"][launch[launch >= 0]]
    return ops["start_ns"][rows], issue


def _backlog(ev: PatternEvidence, starts, ends, issued, k_start, k_issue, hi: int, th: Thresholds) -> None:
    """Fill the step's issue evidence: its tail collectives, those of them issued during compute and those
    queued (issued during compute, started late the moment an earlier collective ended), and the tail time
    of every collective issued during compute (the backlog)."""
    phase_end = ev.compute_phase_end_ns
    a, b = np.searchsorted(k_start, [ev.compute_start_ns, phase_end])
    last_issue = int(k_issue[a:b].max()) if b > a else None      # the latest compute issue of the phase
    during = (issued >= 0) & (issued < last_issue) if last_issue is not None else np.zeros(starts.size, bool)
    tail = starts >= phase_end
    late = tail & during & (starts - issued > th.launch_prompt_ns)
    # Released by an earlier collective: another one ended within launch_prompt_ns before its start (an end
    # at or before a start belongs to a collective that began earlier).
    order = np.sort(ends)
    near = np.searchsorted(order, starts, side="right") - np.searchsorted(order, starts - th.launch_prompt_ns)
    own = (ends >= starts - th.launch_prompt_ns) & (ends <= starts)          # a zero-length one counts itself
    queued = late & (near - own > 0)
    ev.tail_collectives = int(tail.sum())
    ev.issued_in_compute = int(during.sum())
    ev.issued_during_compute = int((tail & during).sum())
    ev.queued = int(queued.sum())
    ev.backlog_ns = _tail_of(starts, ends, during, phase_end, hi)


def _tail_of(starts, ends, rows: np.ndarray, phase_end: int, hi: int) -> int:
    """The time at or after the compute phase end covered by the selected collectives."""
    if not rows.any():
        return 0
    return int(iv.length_in(iv.union(starts[rows], ends[rows]), [phase_end], [hi])[0])


def shared_stream_fraction(trace, device: int | None, lo: np.ndarray, hi: np.ndarray) -> list[float | None]:
    """Per window: the share of its comm activity time (activities starting in it, on ``device``) that ran
    on a stream which also ran a compute kernel starting in the same window; None without comm activities.
    Streams are compared within the window only: a comm stream that computes in another step is not shared."""
    n = lo.size
    ops = trace.device_ops
    if device is None or not len(ops) or n == 0:
        return [None] * n
    on = ops["device"] == device
    start, end, stream = (ops[c] for c in ("start_ns", "end_ns", "stream"))

    def in_windows(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        w = np.searchsorted(lo, start[rows], side="right") - 1
        ok = (w >= 0) & (start[rows] < hi[np.maximum(w, 0)])
        return rows[ok], w[ok]

    comm, cw = in_windows(np.flatnonzero(on & isin(ops["kind"], ("comm",))))
    comp, kw = in_windows(np.flatnonzero(on & isin(ops["kind"], ("compute",))))
    lanes, code = np.unique(np.concatenate([stream[comm], stream[comp]]), return_inverse=True)   # a few streams
    code = code.reshape(-1)
    computes = np.zeros((n, len(lanes)), dtype=bool)        # (window, stream) pairs that ran compute
    computes[kw, code[comm.size:]] = True
    shared = computes[cw, code[:comm.size]]
    dur = (end[comm] - start[comm]).astype(np.int64)
    total, on_shared = np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.int64)
    np.add.at(total, cw, dur)
    np.add.at(on_shared, cw[shared], dur[shared])
    return [None if t <= 0 else round(x / t, 4) for x, t in zip(on_shared.tolist(), total.tolist())]


def step_features(compute: iv.IntervalSet, comm: iv.IntervalSet, lo: np.ndarray, hi: np.ndarray,
                  comm_starts: np.ndarray, a: np.ndarray, b: np.ndarray) -> list[PatternEvidence]:
    """The evidence of every window at once (``op`` left unset); the comm activities starting in window k
    are ``comm_starts[a[k]:b[k]]``. Windows are sorted and disjoint, as step windows are.

    With C and K the comm and compute sets clipped to a window, and ``C ∖ K`` its exposed pieces:
    ``compute_after(p) = |K ∩ [p, end of C)|`` and ``exposed_after(p)`` the exposed length from piece p on;
    the compute phase ends at the first piece with the largest positive ``exposed_after − compute_after``
    among those before which at least half of the window's compute ran, else at the end of C. Clipping
    commutes with the set operations, so they run once on the whole run.
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
    # Only where at least half of the window's compute ran before: the phase is where the compute is.
    compute_total = iv.length_in(compute, lo, hi)
    score = np.where(2 * iv.length_in(compute, lo[xw], xs) >= compute_total[xw], score, np.iinfo(np.int64).min)
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
