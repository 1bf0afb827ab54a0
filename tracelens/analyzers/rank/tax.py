"""The overlap tax: how much longer compute kernels ran while communication ran beside them, claimed only
where the trace shows it.

Communication kernels take SMs, memory bandwidth and L2 from the compute they overlap, so hidden
communication can still cost time. On the rank's main device, for every compute kernel with identity
``(name, launch configuration, input shapes of the op that launched it)``:

- *alone*: no communication activity overlapped it; *under communication*: some did (``|kernel ∩ C| > 0``);
- **a comparable baseline**: the identity must do one amount of work. The robust spread (``IQR / median``)
  of its runs alone, and without input shapes of its runs under communication too, must be at most
  ``tax_max_spread`` (else the kernel is *not compared, its work varies*: a persistent GEMM whose grid is
  the SM count runs every problem size under one name, grid and block), and there must be at least
  ``tax_min_baseline`` runs alone, ``tax_min_alone_unshaped`` where the trace records no input shapes
  (else *too few runs alone*);
- **a significant difference**: the Hodges-Lehmann shift between the runs under communication and the runs
  alone (the median of every pairwise difference) with its distribution-free confidence interval at
  ``tax_confidence``, from the exact Mann-Whitney distribution (its normal approximation when both samples
  have at least :data:`_EXACT_BELOW` runs): order statistics of the pairwise differences, so no random
  draw and the same report on every run. The identity is slowed only when the interval's low end is above 0;
- a run's tax is the shift clipped to ``[0, |kernel ∩ C|]`` (a slowdown can only have happened while
  communication ran), and so are its low and high ends (an unbounded high end: the whole overlap).

Per step window (a kernel belongs to the window its start falls in): ``overlap_tax_ns`` (the significant
identities' runs), its interval ``overlap_tax_low_ns`` and ``overlap_tax_high_ns`` (the high end counts every
compared identity: a slowdown too small to prove may still be there), the kernels under communication
compared, left out for too few runs alone, and left out because their work varies. One ``overlap-tax``
finding per rank when the tax is material; its severity follows the low end. docs/metrics.md, "Overlap tax".
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np

from ...model.columns import Lookup, categorical_of, isin, unique_rows
from ...model.linking import take
from .. import intervals as iv
from ..thresholds import material
from ..wording import Finding
from .context import RankContext

_TOP = 3                     # slowed kernels, and kernels left out, named in the finding
_SAMPLE = 256                # runs of each looked at for the collective that overlapped them
_EXACT_BELOW = 10            # the exact rank distribution while the smaller sample has fewer runs than this
_UNBOUNDED = np.iinfo(np.int64).max // 4     # an interval end the samples cannot bound (before clipping)
COMPARED, TOO_FEW, VARIES = 0, 1, 2          # an identity's status


@dataclass
class Tax:
    """Per step window: the tax, its interval and the kernels under communication compared, left out for too
    few runs alone and left out because their work varies. Per compared kernel under communication (in a
    window): its row, identity and tax with its ends (for the finding's evidence). Per identity: its status,
    runs alone, their median and spread, and the shift with its interval."""

    tax_ns: np.ndarray
    low_ns: np.ndarray
    high_ns: np.ndarray
    compared: np.ndarray
    uncompared: np.ndarray
    varying: np.ndarray
    rows: np.ndarray
    group: np.ndarray
    excess: np.ndarray
    excess_low: np.ndarray
    excess_high: np.ndarray
    left_rows: np.ndarray        # kernels under communication left out (in a window), and their identity
    left_group: np.ndarray
    ident: dict


def _empty(n: int) -> Tax:
    z = np.zeros(n, dtype=np.int64)
    e = np.empty(0, dtype=np.int64)
    return Tax(z, z.copy(), z.copy(), z.copy(), z.copy(), z.copy(), e, e, e, e, e, e, e, {})


def identity(trace, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A group id per device row (equal ids: same kernel name, launch configuration and input shapes) and
    whether the trace recorded the input shapes of each row's op."""
    ops = trace.device_ops
    cat = categorical_of(ops["name"])
    name = cat.codes[rows].astype(np.int64) if cat is not None else \
        np.unique(ops["name"][rows].astype(str), return_inverse=True)[1].reshape(-1)
    shapes = take(trace.host_ops["shapes"], ops["op_idx"][rows], -1)
    keys = np.stack([name, ops["config"][rows], shapes], axis=1)
    return unique_rows(keys)[2], shapes >= 0


def measure(ctx: RankContext) -> Tax:
    """The overlap tax of every step window (vectorised over kernels and identities)."""
    trace, sets, windows, th = ctx.trace, ctx.sets, ctx.windows, ctx.thresholds
    n = windows.step.size
    if sets.mode != "gpu" or sets.comm[0].size == 0:
        return _empty(n)
    ops = trace.device_ops
    rows = np.flatnonzero((ops["device"] == sets.device) & isin(ops["kind"], ("compute",)))
    if rows.size == 0:
        return _empty(n)
    s, e = ops["start_ns"][rows], ops["end_ns"][rows]
    dur = e - s
    under = iv.length_in(sets.comm, s, e)
    overlapped = under > 0
    if not overlapped.any():
        return _empty(n)
    group, shaped = identity(trace, rows)
    size = int(group.max()) + 1
    alone = _spread(group, dur, ~overlapped, size)
    beside = _spread(group, dur, overlapped, size)
    status = _status(alone, beside["spread"], np.bincount(group, weights=shaped, minlength=size) > 0, th)
    compared = overlapped & (status[group] == COMPARED)
    shift = _shift(group[compared], dur[compared], group[~overlapped], dur[~overlapped], size,
                   th.tax_confidence)
    g = group
    slowed = shift["low"][g] > 0
    zero = np.zeros(rows.size, dtype=np.int64)
    excess = np.where(compared & slowed, np.clip(shift["shift"][g], 0, under), zero)
    low = np.where(compared & slowed, np.clip(shift["low"][g], 0, under), zero)
    high = np.where(compared, np.clip(shift["high"][g], 0, under), zero)
    w = np.searchsorted(windows.start, s, side="right") - 1
    inside = (w >= 0) & (s < windows.end[np.maximum(w, 0)])
    wk = np.where(inside, w, n)                       # n: outside every window, dropped below

    def per_window(values) -> np.ndarray:
        return np.bincount(wk, weights=values, minlength=n + 1)[:n].round().astype(np.int64)

    left = overlapped & ~compared
    pick, drop = compared & inside, left & inside
    return Tax(per_window(excess), per_window(low), per_window(high), per_window(compared.astype(np.int64)),
               per_window((left & (status[g] == TOO_FEW)).astype(np.int64)),
               per_window((left & (status[g] == VARIES)).astype(np.int64)),
               rows[pick], g[pick], excess[pick], low[pick], high[pick], rows[drop], g[drop],
               {"status": status, "under_spread": beside["spread"], **alone, **shift})


def _spread(group: np.ndarray, dur: np.ndarray, pick: np.ndarray, size: int) -> dict:
    """Per identity, from its runs picked: their number (``alone``), median (the mean of the two middle
    values, in whole ns, for an even count; 0 without any), spread (the interquartile range, numpy's linear
    method, over the median), least and most."""
    g, d = group[pick], dur[pick]
    count = np.bincount(g, minlength=size)
    order = np.lexsort((d, g))
    d = d[order]
    first = np.cumsum(count) - count
    has = count > 0
    last = first + np.maximum(count, 1) - 1

    def quantile(q: float) -> np.ndarray:
        pos = first + q * (np.maximum(count, 1) - 1)
        lo = np.floor(pos).astype(np.int64)
        hi = np.minimum(lo + 1, last)
        out = np.zeros(size)
        out[has] = d[lo[has]] + (pos[has] - lo[has]) * (d[hi[has]] - d[lo[has]])
        return out

    lo, hi = first + (count - 1) // 2, first + count // 2
    med = np.zeros(size, dtype=np.int64)
    least, most = np.zeros(size, dtype=np.int64), np.zeros(size, dtype=np.int64)
    med[has] = (d[lo[has]] + d[hi[has]]) // 2
    least[has], most[has] = d[first[has]], d[last[has]]
    q1, q3 = quantile(0.25), quantile(0.75)
    iqr = q3 - q1
    spread = np.where(med > 0, iqr / np.maximum(med, 1), np.where(iqr > 0, np.inf, 0.0))
    return {"alone": count, "median": med, "spread": spread, "least": least, "most": most}


def _status(alone: dict, under_spread: np.ndarray, shaped: np.ndarray, th) -> np.ndarray:
    """COMPARED, TOO_FEW or VARIES per identity. A spread needs ``tax_min_baseline`` runs alone to be
    measured; past it, too wide a spread alone says the work varies, however many runs there are (shapes do
    not fix the work of a data-dependent kernel). Without shapes the runs under communication must be tight
    too: the trace cannot tell a slowdown that varies from work that varies (a call site that only ever
    runs under communication, with other sizes)."""
    count = alone["alone"]
    least = max(th.tax_min_baseline, 1)
    need = np.where(shaped, least, max(least, th.tax_min_alone_unshaped))
    varies = (count >= least) & ((alone["spread"] > th.tax_max_spread) |
                                 (~shaped & (under_spread > th.tax_max_spread)))
    status = np.full(count.size, COMPARED, dtype=np.int64)
    status[count < need] = TOO_FEW
    status[varies] = VARIES
    return status


def _shift(gu: np.ndarray, u: np.ndarray, ga: np.ndarray, a: np.ndarray, size: int, confidence: float) -> dict:
    """Per identity with runs under communication (``gu``, ``u``) and alone (``ga``, ``a``): the
    Hodges-Lehmann shift (the median of the differences u_i − a_j, the mean of the two middle ones in whole ns
    for an even count) and its ``confidence`` interval [D_(k), D_(mn+1−k)] (1-based order statistics of the
    m·n differences; k from the Mann-Whitney distribution, :func:`_rank_k`). Ends the samples cannot bound
    are ∓:data:`_UNBOUNDED`; identities without both samples get shift 0 and an interval (−∞, +∞)."""
    shift = np.zeros(size, dtype=np.int64)
    low = np.full(size, -_UNBOUNDED, dtype=np.int64)
    high = np.full(size, _UNBOUNDED, dtype=np.int64)
    out = {"shift": shift, "low": low, "high": high}
    n = np.bincount(gu, minlength=size)
    m = np.bincount(ga, minlength=size)
    ids = np.flatnonzero((n > 0) & (m > 0))
    if ids.size == 0:
        return out
    # Compact the identities that are measured, alone runs sorted within each.
    compact = np.full(size, -1, dtype=np.int64)
    compact[ids] = np.arange(ids.size)
    keep_a = compact[ga] >= 0
    ca, av = compact[ga[keep_a]], a[keep_a]
    order = np.lexsort((av, ca))
    ca, av = ca[order], av[order]
    cu, uv = compact[gu], u
    mm, nn = m[ids], n[ids]
    total = mm * nn
    k = np.array([_rank_k(int(x), int(y), confidence) for x, y in zip(mm.tolist(), nn.tolist())], dtype=np.int64)
    # Targets: the two middle ranks, and the interval's ranks where k > 0.
    mid_lo, mid_hi = (total + 1) // 2, total // 2 + 1
    bounded = k > 0
    tg = np.concatenate([np.arange(ids.size)] * 2 + [np.flatnonzero(bounded)] * 2)
    tk = np.concatenate([mid_lo, mid_hi, k[bounded], (total - k + 1)[bounded]])
    found = _kth_difference(ca, av, cu, uv, ids.size, tg, tk)
    c = ids.size
    shift[ids] = (found[:c] + found[c:2 * c]) // 2
    nb = int(bounded.sum())
    low[ids[bounded]] = found[2 * c:2 * c + nb]
    high[ids[bounded]] = found[2 * c + nb:]
    return out


def _kth_difference(ga, a, gu, u, groups: int, tg, tk) -> np.ndarray:
    """For each target t: the tk[t]-th smallest (1-based) of the differences u_i − a_j over the pairs of
    identity tg[t] (``a`` sorted within each identity, identities ascending). A bisection on the integer
    difference, every target at once: F_g(D) = #{(i, j): u_i − a_j ≤ D} = Σ_i #{j: a_j ≥ u_i − D} counts with
    one sorted search per run under communication."""
    count = np.bincount(ga, minlength=groups)
    end = np.cumsum(count)
    # One sorted key per alone run: identity-major, value-minor. Durations past the cap (hours, with this
    # many identities) would overflow the key; no kernel runs that long.
    cap = (2**62) // max(groups, 1) - 2
    a = np.minimum(a, cap)
    u = np.minimum(u, cap)
    width = int(a.max()) + 2 if a.size else 2
    keys = ga * width + a
    amin = np.full(groups, np.iinfo(np.int64).max)
    amax = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(amin, ga, a)
    np.maximum.at(amax, ga, a)
    umin = np.full(groups, np.iinfo(np.int64).max)
    umax = np.full(groups, np.iinfo(np.int64).min)
    np.minimum.at(umin, gu, u)
    np.maximum.at(umax, gu, u)
    lo = (umin - amax)[tg]
    hi = (umax - amin)[tg]
    # Every run under communication of each target's identity.
    order = np.argsort(gu, kind="stable")
    gus, us = gu[order], u[order]
    ucount = np.bincount(gu, minlength=groups)
    ustart = np.cumsum(ucount) - ucount
    per = ucount[tg]
    qt = np.repeat(np.arange(tg.size), per)
    qi = ustart[tg][qt] + (np.arange(qt.size) - np.repeat(np.cumsum(per) - per, per))
    qg, qu = gus[qi], us[qi]
    while True:
        active = lo < hi
        if not active.any():
            return lo
        mid = lo + (hi - lo) // 2
        x = np.clip(qu - mid[qt], 0, width - 1)
        ge = end[qg] - np.searchsorted(keys, qg * width + x, side="left")
        f = np.bincount(qt, weights=ge, minlength=tg.size)
        enough = f >= tk
        hi = np.where(active & enough, mid, hi)
        lo = np.where(active & ~enough, mid + 1, lo)


@lru_cache(maxsize=4096)
def _rank_k(m: int, n: int, confidence: float) -> int:
    """The largest k with P(U ≤ k − 1) ≤ (1 − confidence) / 2, U the Mann-Whitney count of pairs under no
    difference (m and n runs): [D_(k), D_(mn+1−k)] then covers the shift with at least ``confidence``. 0:
    the samples are too small for any interval at that confidence. Exact while the smaller sample has fewer
    than :data:`_EXACT_BELOW` runs (the coefficients of the Gaussian binomial [m+n choose m]), else the
    normal approximation with a continuity correction."""
    tail = (1.0 - confidence) / 2
    if m > n:
        m, n = n, m
    if m <= 0:
        return 0
    if m >= _EXACT_BELOW:
        z = NormalDist().inv_cdf(1.0 - tail)
        return max(0, int(np.floor(m * n / 2 - z * np.sqrt(m * n * (m + n + 1) / 12) + 0.5)))
    c = np.zeros(m * n + 1)
    c[0] = 1.0
    for i in range(1, m + 1):       # multiply by (1 − q^(n+i)) / (1 − q^i)
        c[n + i:] -= c[:c.size - n - i].copy()
        pad = -c.size % i
        c = np.concatenate([c, np.zeros(pad)]).reshape(-1, i).cumsum(axis=0).reshape(-1)[:m * n + 1]
    cdf = np.cumsum(c)
    return int(np.searchsorted(cdf, tail * cdf[-1] * (1 + 1e-12), side="right"))


def finding(ctx: RankContext, tax: Tax) -> list[Finding]:
    """The rank's ``overlap-tax`` finding when its tax is material (mean per step against the mean step):
    a warning when the interval's low end is material too, else info."""
    steps, th = ctx.steps, ctx.thresholds
    total = int(tax.tax_ns.sum())
    if total <= 0 or not steps:
        return []
    duration = sum(st.duration_ns for st in steps)
    impact = total // len(steps)
    step_ns = duration // len(steps)
    if not material(th, impact, step_ns):
        return []
    low, high = int(tax.low_ns.sum()), int(tax.high_ns.sum())
    sure = material(th, low // len(steps), step_ns)
    hidden = sum(st.overlap_ns for st in steps)
    exposed = sum(st.exposed_comm_ns for st in steps)
    st = tax.ident["status"]
    seen = np.unique(tax.group)
    return [Finding(
        id="overlap-tax", severity="warning" if sure else "info", rank=ctx.trace.meta.rank,
        step=None, verdict=None,
        evidence={"overlap_tax_ns": total, "overlap_tax_low_ns": low, "overlap_tax_high_ns": high,
                  "confidence": th.tax_confidence, "duration_ns": duration, "tax_fraction": total / duration,
                  "low_fraction": low / duration, "steps": len(steps), "overlap_ns": hidden,
                  "exposed_comm_ns": exposed, "effective_exposed_ns": exposed + total,
                  "compared": int(tax.compared.sum()), "identities": int(seen.size),
                  "slowed": int((tax.ident["low"][seen] > 0).sum()),
                  "uncompared": int(tax.uncompared.sum()), "varying": int(tax.varying.sum()),
                  "max_spread": th.tax_max_spread, "kernels": _top(ctx, tax),
                  "left_out": _left_out(ctx, tax, st),
                  "impact_ns": impact, "low_impact_ns": low // len(steps), "material": True})]


def _top(ctx, tax: Tax) -> list[dict]:
    """The most taxed kernel identities: name, runs under communication and alone, baseline, mean duration
    under communication, the shift with its interval, the tax with its interval, and the collective that
    overlapped them longest."""
    ops = ctx.trace.device_ops
    groups, inv = np.unique(tax.group, return_inverse=True)
    per = np.bincount(inv, weights=tax.excess)
    per_low = np.bincount(inv, weights=tax.excess_low)
    per_high = np.bincount(inv, weights=tax.excess_high)
    order = [int(i) for i in np.argsort(-per, kind="stable")[:_TOP] if per[i] > 0]
    names, s, e = Lookup(ops["name"]), ops["start_ns"], ops["end_ns"]
    ident = tax.ident
    out = []
    for i in order:
        sel = inv == i
        runs = tax.rows[sel]
        g = int(groups[i])
        ops_under = [o for o in _collective_under(ctx, runs[:_SAMPLE]).tolist() if o is not None]
        out.append({"name": names[int(runs[0])], "runs": int(sel.sum()), "alone": int(ident["alone"][g]),
                    "baseline_ns": int(ident["median"][g]), "spread": float(ident["spread"][g]),
                    "mean_ns": int(round(float((e[runs] - s[runs]).mean()))),
                    "shift_ns": int(ident["shift"][g]), "shift_low_ns": int(ident["low"][g]),
                    "shift_high_ns": int(ident["high"][g]),
                    "tax_ns": int(round(float(per[i]))), "tax_low_ns": int(round(float(per_low[i]))),
                    "tax_high_ns": int(round(float(per_high[i]))),
                    "collective": max(set(ops_under), key=ops_under.count) if ops_under else None})
    return out


def _left_out(ctx, tax: Tax, status: np.ndarray) -> list[dict]:
    """The identities left out that ran longest under communication: name, why (``varies`` or
    ``too-few``), runs under communication and alone, and the least and most of the runs alone."""
    if tax.left_rows.size == 0:
        return []
    ops = ctx.trace.device_ops
    groups, inv = np.unique(tax.left_group, return_inverse=True)
    time = np.bincount(inv, weights=ops["end_ns"][tax.left_rows] - ops["start_ns"][tax.left_rows])
    names, ident = Lookup(ops["name"]), tax.ident
    out = []
    for i in np.argsort(-time, kind="stable")[:_TOP].tolist():
        g = int(groups[i])
        sel = inv == i
        out.append({"name": names[int(tax.left_rows[sel][0])],
                    "reason": "varies" if status[g] == VARIES else "too-few", "runs": int(sel.sum()),
                    "time_ns": int(round(float(time[i]))), "alone": int(ident["alone"][g]),
                    "alone_min_ns": int(ident["least"][g]), "alone_max_ns": int(ident["most"][g]),
                    "spread": float(ident["spread"][g]) if ident["alone"][g] else None})
    return out


def _collective_under(ctx, rows: np.ndarray) -> np.ndarray:
    """Per kernel row, the op (else kernel name) of the communication activity that overlapped it longest."""
    exp = ctx.exposure
    out = np.full(rows.size, None, dtype=object)
    if exp.empty or rows.size == 0:
        return out
    ops = ctx.trace.device_ops
    cs = exp["start_ns"]
    ce = cs + exp["duration_ns"]
    label = np.where([o is not None and o == o for o in exp["op"].tolist()], exp["op"], exp["name"])
    s, e = ops["start_ns"][rows], ops["end_ns"][rows]
    best = np.zeros(rows.size, dtype=np.int64)
    for lo in range(0, cs.size, 4096):            # at most _SAMPLE x 4096 overlaps at a time
        a, b = cs[lo:lo + 4096], ce[lo:lo + 4096]
        ov = np.minimum(e[:, None], b[None, :]) - np.maximum(s[:, None], a[None, :])
        j = ov.argmax(axis=1)
        top = ov[np.arange(rows.size), j]
        better = top > best
        out[better] = label[lo + j[better]]
        best = np.where(better, top, best)
    return out
