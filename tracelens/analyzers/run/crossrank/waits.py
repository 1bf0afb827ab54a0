"""Wait versus transfer of every matched instance, and their sums per rank and step (docs/metrics.md,
"Wait and transfer").

For an instance with member intervals ``[s_r, e_r]``: transfer ``T = min_r (e_r - s_r)`` (the last rank to
arrive waits least: its duration is the transfer alone), ``wait_r = (e_r - s_r) - T``, arrival skew
``max s_r - min s_r`` and the last rank ``argmax s_r`` on aligned clocks. Durations do not depend on clocks,
so waits and transfers never need the offsets; skew and the last rank do, and are left unknown (-1) for an
instance with a member whose clock could not be aligned. ``exposed_wait_r = max(0, exposed_r - T)``: at most
``T`` of the instance's time moved data, so exposed time beyond it was spent waiting.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class Waits:
    inst: np.ndarray           # per matched row: its instance index
    wait: np.ndarray           # per matched row
    exposed_wait: np.ndarray   # per matched row
    transfer: np.ndarray       # per instance
    skew: np.ndarray           # per instance, -1 when a member's clock is not aligned
    last: np.ndarray           # per instance: the matched row of the last rank, -1 when none is last alone
    start: np.ndarray          # per instance: the earliest aligned start (for ordering)


def compute(start: np.ndarray, end: np.ndarray, exposed: np.ndarray, offset: np.ndarray, aligned: np.ndarray,
            starts: np.ndarray) -> Waits:
    """Rows grouped by instance (``starts``: the first row of each); ``offset`` and ``aligned`` per row."""
    n = len(start)
    cnt = np.diff(np.append(starts, n))
    inst = np.repeat(np.arange(len(starts)), cnt)
    dur = end - start
    if not n:
        z = np.empty(0, np.int64)
        return Waits(inst=z, wait=z, exposed_wait=z, transfer=z, skew=z, last=z, start=z)
    transfer = np.minimum.reduceat(dur, starts)
    wait = dur - transfer[inst]
    exposed_wait = np.maximum(exposed - transfer[inst], 0)
    s = start - offset
    smax = np.maximum.reduceat(s, starts)
    smin = np.minimum.reduceat(s, starts)
    trusted = np.minimum.reduceat(aligned.astype(np.int8), starts).astype(bool)
    skew = np.where(trusted, smax - smin, -1)
    at_max = s == smax[inst]
    alone = np.add.reduceat(at_max.astype(np.int64), starts) == 1
    row_of_max = np.full(len(starts), -1, dtype=np.int64)
    hit = np.flatnonzero(at_max)
    row_of_max[inst[hit][::-1]] = hit[::-1]          # the first row at the max of each instance
    last = np.where(trusted & alone & (skew > 0), row_of_max, -1)
    return Waits(inst=inst, wait=wait, exposed_wait=exposed_wait, transfer=transfer, skew=skew, last=last,
                 start=smin)


def per_rank_step(pos: np.ndarray, step: np.ndarray, values: dict[str, np.ndarray]) -> dict:
    """(position, step) -> {name: sum} over matched rows."""
    if not len(pos):
        return {}
    o = np.lexsort((step, pos))
    ps, ss = pos[o], step[o]
    change = np.ones(len(o), dtype=bool)
    change[1:] = (ps[1:] != ps[:-1]) | (ss[1:] != ss[:-1])
    st = np.flatnonzero(change)
    sums = {k: np.add.reduceat(v[o], st).tolist() for k, v in values.items()}
    keys = list(zip(ps[st].tolist(), ss[st].tolist()))
    return {key: {k: sums[k][i] for k in sums} for i, key in enumerate(keys)}
