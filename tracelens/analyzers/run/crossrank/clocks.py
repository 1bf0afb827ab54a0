"""Clock offsets between ranks from the end times of matched collectives (docs/metrics.md, "Clocks").

Blocking collectives end together on every member, so on a rank whose clock runs ``d`` ahead of the
reference rank's, a matched instance ends ``d`` later. The offset is the median of those differences over
the instances the rank shares with the reference rank (the large ones, >= bandwidth_min_bytes, when at
least three are shared: small ones end less together), and its spread p90 - p10 of the same differences.
Ranks on one host share a clock, so with every host known one offset is estimated per host, from all its
ranks' differences. An offset whose spread exceeds clock_max_spread_ns is reported but not applied.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....model.columns import percentile
from ...thresholds import Thresholds

_MIN_LARGE = 3


@dataclass
class Clocks:
    offset: np.ndarray         # per position: ns to subtract from its times (0 where not applied)
    estimate: list             # per position: the estimated offset (int) or None when it shares no instance
    spread: list               # per position: p90 - p10 of its differences, or None
    applied: np.ndarray        # per position: whether its times may be compared with others' (bool)
    unit: list                 # per position: the host (str) when offsets are per host, else None
    reference: int             # position of the reference rank


def _median(v: np.ndarray) -> int:
    return int(np.round(np.median(v)))


def estimate(pos: np.ndarray, inst: np.ndarray, end: np.ndarray, large: np.ndarray, hosts: list,
             th: Thresholds) -> Clocks:
    """``pos``, ``inst``, ``end``: matched rows (position, instance index, end time); ``large``: per
    instance, whether its message is large; ``hosts``: per position, its host or None."""
    n = len(hosts)
    ref = 0
    per_host = all(h is not None for h in hosts)
    unit_of = [hosts[p] if per_host else p for p in range(n)]
    ref_unit = unit_of[ref]
    est: list = [None] * n
    spread: list = [None] * n
    applied = np.zeros(n, dtype=bool)
    offset = np.zeros(n, dtype=np.int64)
    ninst = int(inst.max(initial=-1)) + 1
    ref_end = np.full(ninst, -1, dtype=np.int64)
    has_ref = np.zeros(ninst, dtype=bool)
    at_ref = pos == ref
    ref_end[inst[at_ref]] = end[at_ref]
    has_ref[inst[at_ref]] = True
    shared = has_ref[inst] & ~at_ref
    names = list(dict.fromkeys(unit_of))
    code = {u: i for i, u in enumerate(names)}
    ucode = np.array([code[u] for u in unit_of], dtype=np.int64)
    row_unit = ucode[pos]
    big = large[inst] if len(inst) else np.zeros(0, dtype=bool)
    use_large = np.bincount(row_unit[shared & big], minlength=len(names)) >= _MIN_LARGE
    sel = np.flatnonzero(shared & (big | ~use_large[row_unit]))
    order = sel[np.argsort(row_unit[sel], kind="stable")]
    d_all = end[order] - ref_end[inst[order]]
    bounds = np.searchsorted(row_unit[order], np.arange(len(names) + 1))
    members = np.argsort(ucode, kind="stable")
    member_bounds = np.searchsorted(ucode[members], np.arange(len(names) + 1))
    for u in range(len(names)):
        ps = members[member_bounds[u]:member_bounds[u + 1]].tolist()
        if names[u] == ref_unit:
            for p in ps:
                est[p], spread[p], applied[p] = 0, 0, True
            continue
        d = d_all[bounds[u]:bounds[u + 1]]
        if not len(d):
            continue
        off = _median(d)
        sp = int(np.round(percentile(d, 90) - percentile(d, 10)))
        ok = sp <= th.clock_max_spread_ns
        for p in ps:
            est[p], spread[p], applied[p] = off, sp, ok
            offset[p] = off if ok else 0
    return Clocks(offset=offset, estimate=est, spread=spread, applied=applied,
                  unit=[hosts[p] if per_host else None for p in range(n)], reference=ref)
