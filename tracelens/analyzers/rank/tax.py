"""The overlap tax: how much longer compute kernels ran while communication ran beside them.

Communication kernels take SMs, memory bandwidth and L2 from the compute they overlap, so hidden
communication can still cost time. On the rank's main device, for every compute kernel with identity
``(name, launch configuration, input shapes of the op that launched it)``:

- *alone*: no communication activity overlapped it; *overlapped*: some did (``|kernel ∩ C| > 0``);
- baseline: the median duration of the kernel's identity over its alone runs in the trace, used only with
  at least ``tax_min_baseline`` of them (fewer: the kernel is overlapped but *uncompared*);
- a compared kernel's tax: ``duration − baseline``, clipped to ``[0, |kernel ∩ C|]``: a kernel that ran
  faster than its baseline earns nothing back, and a slowdown can only have happened while communication
  ran (noise in a barely overlapped kernel is not charged in full).

Per step window (a kernel belongs to the window its start falls in): ``overlap_tax_ns``, the number of
compared and uncompared overlapped kernels, and ``effective_exposed_ns = exposed_comm_ns + overlap_tax_ns``.
One ``overlap-tax`` finding per rank when the tax is material. docs/metrics.md, "Overlap tax".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...columns import Lookup, categorical_of, isin, unique_rows
from ...linking import take
from .. import intervals as iv
from ..thresholds import material
from ..wording import Finding

_TOP = 3                     # slowed kernels named in the finding
_SAMPLE = 256                # runs of each looked at for the collective that overlapped them


@dataclass
class Tax:
    """Per step window: the tax and the overlapped kernels compared and not; and per compared kernel its
    row, identity group, baseline and tax (for the finding's evidence)."""

    tax_ns: np.ndarray
    compared: np.ndarray
    uncompared: np.ndarray
    rows: np.ndarray
    group: np.ndarray
    baseline: np.ndarray
    excess: np.ndarray


def _empty(n: int) -> Tax:
    z = np.zeros(n, dtype=np.int64)
    e = np.empty(0, dtype=np.int64)
    return Tax(z, z.copy(), z.copy(), e, e, e, e)


def identity(trace, rows: np.ndarray) -> np.ndarray:
    """A group id per device row: equal ids, same kernel name, launch configuration and input shapes."""
    ops = trace.device_ops
    cat = categorical_of(ops["name"])
    name = cat.codes[rows].astype(np.int64) if cat is not None else \
        np.unique(ops["name"][rows].astype(str), return_inverse=True)[1].reshape(-1)
    shapes = take(trace.host_ops["shapes"], ops["op_idx"][rows], -1)
    keys = np.stack([name, ops["config"][rows], shapes], axis=1)
    return unique_rows(keys)[2]


def measure(trace, sets, windows, min_baseline: int) -> Tax:
    """The overlap tax of every step window (vectorised over kernels)."""
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
    group = identity(trace, rows)
    baseline, samples = _medians(group, dur, ~overlapped)
    compared = overlapped & (samples[group] >= max(min_baseline, 1))
    excess = np.where(compared, np.clip(dur - baseline[group], 0, under), 0)
    w = np.searchsorted(windows.start, s, side="right") - 1
    inside = (w >= 0) & (s < windows.end[np.maximum(w, 0)])
    wk = np.where(inside, w, n)                       # n: outside every window, dropped below

    def per_window(values) -> np.ndarray:
        return np.bincount(wk, weights=values, minlength=n + 1)[:n].round().astype(np.int64)

    pick = compared & inside
    return Tax(per_window(excess), per_window(compared.astype(np.int64)),
               per_window((overlapped & ~compared).astype(np.int64)), rows[pick], group[pick],
               baseline[group[pick]], excess[pick])


def _medians(group: np.ndarray, dur: np.ndarray, alone: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per group: the median duration of its alone kernels (the mean of the two middle values, in whole ns,
    for an even count; 0 without any) and their number."""
    g, d = group[alone], dur[alone]
    size = int(group.max()) + 1 if group.size else 0
    count = np.bincount(g, minlength=size)
    order = np.lexsort((d, g))
    d = d[order]
    first = np.cumsum(count) - count
    lo, hi = first + (count - 1) // 2, first + count // 2
    has = count > 0
    med = np.zeros(size, dtype=np.int64)
    med[has] = (d[lo[has]] + d[hi[has]]) // 2
    return med, count


def finding(ctx, tax: Tax) -> list[Finding]:
    """The rank's ``overlap-tax`` finding when its tax is material (mean per step against the mean step)."""
    steps, th = ctx.steps, ctx.thresholds
    total = int(tax.tax_ns.sum())
    if total <= 0 or not steps:
        return []
    duration = sum(st.duration_ns for st in steps)
    impact = total // len(steps)
    if not material(th, impact, duration // len(steps)):
        return []
    hidden = sum(st.overlap_ns for st in steps)
    exposed = sum(st.exposed_comm_ns for st in steps)
    return [Finding(
        id="overlap-tax", severity="warning", rank=ctx.trace.meta.rank,
        step=None, verdict=None,
        evidence={"overlap_tax_ns": total, "duration_ns": duration, "tax_fraction": total / duration,
                  "steps": len(steps), "overlap_ns": hidden, "exposed_comm_ns": exposed,
                  "effective_exposed_ns": exposed + total, "compared": int(tax.compared.sum()),
                  "uncompared": int(tax.uncompared.sum()), "kernels": _top(ctx, tax),
                  "impact_ns": impact, "material": True})]


def _top(ctx, tax: Tax) -> list[dict]:
    """The most taxed kernel identities: name, runs, baseline, mean duration under communication, tax, and
    the collective that overlapped them longest."""
    ops = ctx.trace.device_ops
    groups, inv = np.unique(tax.group, return_inverse=True)
    per = np.bincount(inv, weights=tax.excess)
    order = [int(i) for i in np.argsort(-per, kind="stable")[:_TOP] if per[i] > 0]
    names, s, e = Lookup(ops["name"]), ops["start_ns"], ops["end_ns"]
    out = []
    for i in order:
        sel = inv == i
        runs = tax.rows[sel]
        ops_under = [o for o in _collective_under(ctx, runs[:_SAMPLE]).tolist() if o is not None]
        out.append({"name": names[int(runs[0])], "runs": int(sel.sum()), "baseline_ns": int(tax.baseline[sel][0]),
                    "mean_ns": int(round(float((e[runs] - s[runs]).mean()))), "tax_ns": int(round(float(per[i]))),
                    "collective": max(set(ops_under), key=ops_under.count) if ops_under else None})
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
