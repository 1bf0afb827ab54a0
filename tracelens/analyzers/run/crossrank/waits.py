"""Wait versus transfer of every matched instance, and their sums per rank and step (docs/metrics.md,
"Wait and transfer").

For an instance with member intervals ``[s_r, e_r]``: transfer ``T = min_r (e_r - s_r)`` (the last rank to
arrive waits least: its duration is the transfer alone), ``wait_r = (e_r - s_r) - T``, arrival skew
``max s_r - min s_r`` and the last rank ``argmax s_r`` on aligned clocks. Durations do not depend on clocks,
so waits and transfers never need the offsets; skew and the last rank do, and are left unknown (-1) for an
instance with a member whose clock could not be aligned. Per rank, waits and transfers are also taken as
wall-clock time, and the exposed part of the wait is found (:func:`per_rank`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import intervals as iv

_BLOCK_ROWS = 1 << 18        # matched rows per block of ranks in per_rank (temporaries about 35 MB)


@dataclass
class Waits:
    inst: np.ndarray           # per matched row: its instance index
    wait: np.ndarray           # per matched row
    transfer: np.ndarray       # per instance
    skew: np.ndarray           # per instance, -1 when a member's clock is not aligned
    last: np.ndarray           # per instance: the matched row of the last rank, -1 when none is last alone
    start: np.ndarray          # per instance: the earliest aligned start (for ordering)
    trusted: np.ndarray        # per instance: every member's clock aligned


def compute(start: np.ndarray, end: np.ndarray, pos: np.ndarray, offset: np.ndarray, aligned: np.ndarray,
            starts: np.ndarray, inst: np.ndarray | None = None) -> Waits:
    """Rows grouped by instance (``starts``: the first row of each; ``inst``: each row's instance, where the
    caller has it; ``pos``: its rank's position); ``offset`` and ``aligned`` per position (clocks.Clocks)."""
    n = len(start)
    if inst is None:
        inst = np.repeat(np.arange(len(starts)), np.diff(np.append(starts, n)))
    if not n:
        z = np.empty(0, np.int64)
        return Waits(inst=z, wait=z, transfer=z, skew=z, last=z, start=z, trusted=np.empty(0, bool))
    # In place, and the aligned starts dropped before the waits are made: at thousands of ranks each array of
    # every row is 65 MB, and no more than two are made at once here.
    s = offset[pos]
    np.subtract(start, s, out=s)
    smax = np.maximum.reduceat(s, starts)
    smin = np.minimum.reduceat(s, starts)
    trusted = np.minimum.reduceat(aligned.astype(np.int8)[pos], starts).astype(bool)
    skew = np.where(trusted, smax - smin, -1)
    at_max = s == smax[inst]
    del s
    wait = end - start
    transfer = np.minimum.reduceat(wait, starts)
    wait -= transfer[inst]
    alone = np.add.reduceat(at_max, starts, dtype=np.int64) == 1
    row_of_max = np.full(len(starts), -1, dtype=np.int64)
    hit = np.flatnonzero(at_max)
    row_of_max[inst[hit][::-1]] = hit[::-1]          # the first row at the max of each instance
    last = np.where(trusted & alone & (skew > 0), row_of_max, -1)
    return Waits(inst=inst, wait=wait, transfer=transfer, skew=skew, last=last, start=smin, trusted=trusted)


def per_rank(pos: np.ndarray, start: np.ndarray, end: np.ndarray, transfer: np.ndarray, n: int, windows: list,
             exposed: list) -> tuple[dict[str, np.ndarray], dict]:
    """Each rank's wait, transfer and exposed wait as wall-clock time, in total and per step window.

    A matched row waits over ``[start, end - T)`` and transfers over ``[end - T, end)``. Per rank, the
    transfer time is the union of its rows' transfers, the wait the union of their waits where no transfer
    of its own ran (a rank whose collectives overlap in time, on several streams or threads, is not waiting
    while one of them moves data), so wait + transfer never exceed its communication time. The exposed wait
    is its exposed communication (``exposed``: per rank, the set no compute covered) inside that wait: the
    run verdict's peer-wait. ``windows``: per rank, (step numbers, starts, ends) of its step windows; a window
    with no matched row gets no entry. Returns the totals per rank position and {(position, step): sums}.
    """
    totals = {k: np.zeros(n, dtype=np.int64) for k in ("wait_ns", "transfer_ns", "exposed_wait_ns")}
    steps: dict = {}
    if not len(pos):
        return totals, steps
    exposed = [e if len(e) == 2 else (np.empty(0, np.int64), np.empty(0, np.int64)) for e in exposed]
    # Every rank's times moved onto one axis, each rank in a span of its own (its times less its earliest,
    # plus its position times the widest rank's extent), so that the interval algebra runs once for all ranks.
    base = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(base, pos, start)
    top = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(top, pos, end)
    for p in range(n):
        lo, hi = windows[p][1], windows[p][2]
        es, ee = exposed[p]
        base[p] = min([base[p], *(a.min() for a in (lo, es) if len(a))])
        top[p] = max([top[p], *(a.max() for a in (hi, ee) if len(a))])
    used = top >= base
    span = int((top - base)[used].max()) + 1 if used.any() else 1
    if span * n >= 1 << 62:                     # captures too long for one axis: rank by rank
        return _per_rank_each(pos, start, end, end - transfer, n, windows, exposed)
    shift = np.where(used, np.arange(n, dtype=np.int64) * span - base, 0)
    if len(pos) <= _BLOCK_ROWS:
        _on_axis(np.arange(n, dtype=np.int64), pos, start, end, end - transfer, shift, span, windows, exposed, totals,
                 steps)
        return totals, steps
    # Ranks a block at a time, each block's rows on the same axis: the interval algebra's temporaries are a
    # block's, not the run's (at thousands of ranks they were a quarter of a report's peak: bench/RESULTS.md,
    # "NCCL Inspector logs of thousands of ranks"). Ranks' spans never meet, so the sums are the same.
    order = np.argsort(pos, kind="stable")
    bounds = np.searchsorted(pos[order], np.arange(n + 1))
    p0 = 0
    while p0 < n:
        p1 = max(int(np.searchsorted(bounds, bounds[p0] + _BLOCK_ROWS, side="right")) - 1, p0 + 1)
        rows = order[bounds[p0]:bounds[p1]]
        e = end[rows]
        _on_axis(np.arange(p0, p1, dtype=np.int64), pos[rows], start[rows], e, e - transfer[rows], shift, span,
                 windows, exposed, totals, steps)
        p0 = p1
    return totals, steps


def _on_axis(ps: np.ndarray, pos, start, end, cut, shift, span: int, windows, exposed, totals, steps) -> None:
    """:func:`per_rank`'s sums for the ranks at positions ``ps`` (consecutive), from their rows, on the
    shared axis (``shift``, ``span``); into ``totals`` and ``steps``."""
    moved = shift[pos]
    at_cut = cut + moved
    moving = iv.union(at_cut, end + moved)
    waiting = iv.subtract(iv.union(start + moved, at_cut), moving)
    del at_cut
    mine = ps.tolist()
    lost = iv.intersect(iv.union(np.concatenate([exposed[p][0] + shift[p] for p in mine]),
                                 np.concatenate([exposed[p][1] + shift[p] for p in mine])), waiting)
    for k, sets in (("wait_ns", waiting), ("transfer_ns", moving), ("exposed_wait_ns", lost)):
        totals[k][ps] = iv.length_in(sets, ps * span, (ps + 1) * span)
    # Per step window: the windows of every rank on the same axis; a window without a matched row is left out.
    wpos = np.concatenate([np.full(len(windows[p][1]), p, np.int64) for p in mine])
    if not wpos.size:
        return
    wlo = np.concatenate([windows[p][1] for p in mine]).astype(np.int64) + shift[wpos]
    whi = np.concatenate([windows[p][2] for p in mine]).astype(np.int64) + shift[wpos]
    number = [s for p in mine for s in windows[p][0]]
    at = np.searchsorted(wlo, start + moved, side="right") - 1
    inside = (at >= 0) & (start + moved < whi[np.maximum(at, 0)]) & (wpos[np.maximum(at, 0)] == pos)
    hit = np.zeros(len(wlo), dtype=bool)
    hit[at[inside]] = True
    got = {k: iv.length_in(sets, wlo, whi).tolist() for k, sets in
           (("wait_ns", waiting), ("transfer_ns", moving), ("exposed_wait_ns", lost))}
    for k in np.flatnonzero(hit).tolist():
        steps[int(wpos[k]), number[k]] = {name: got[name][k] for name in got}


def _per_rank_each(pos, start, end, cut, n, windows, exposed) -> tuple[dict[str, np.ndarray], dict]:
    """:func:`per_rank` one rank at a time (for captures too long to put every rank on one axis)."""
    totals = {k: np.zeros(n, dtype=np.int64) for k in ("wait_ns", "transfer_ns", "exposed_wait_ns")}
    steps: dict = {}
    order = np.argsort(pos, kind="stable")
    bounds = np.searchsorted(pos[order], np.arange(n + 1))
    for p in range(n):
        rows = order[bounds[p]:bounds[p + 1]]
        if not rows.size:
            continue
        moving = iv.union(cut[rows], end[rows])
        waiting = iv.subtract(iv.union(start[rows], cut[rows]), moving)
        lost = iv.intersect(exposed[p], waiting)
        totals["wait_ns"][p] = iv.length(waiting)
        totals["transfer_ns"][p] = iv.length(moving)
        totals["exposed_wait_ns"][p] = iv.length(lost)
        number, lo, hi = windows[p]
        if not len(lo):
            continue
        w = np.searchsorted(lo, start[rows], side="right") - 1
        hit = np.zeros(len(lo), dtype=bool)
        inside = (w >= 0) & (start[rows] < hi[np.maximum(w, 0)])
        hit[w[inside]] = True
        got = {k: iv.length_in(sets, lo, hi).tolist() for k, sets in
               (("wait_ns", waiting), ("transfer_ns", moving), ("exposed_wait_ns", lost))}
        for k in np.flatnonzero(hit).tolist():
            steps[p, number[k]] = {name: got[name][k] for name in got}
    return totals, steps
