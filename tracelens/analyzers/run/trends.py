"""Drift: whether exposed communication or step time grows or shrinks over the capture (docs/metrics.md,
"Drift"), one ``drift`` finding for the run.

The run's series is, per step, the median over ranks of the quantity (ranks of one run step together; a rank
that drifts alone makes the others wait, which their exposed communication shows). Its slope is Theil-Sen's
(the median of the slopes between every two steps), which a few outlier steps do not move; its confidence is
Kendall's rank test of a monotonic trend. The first and last tenth of the steps are compared by their medians,
so that the finding says how much changed in the quantity's own unit. The ranks named are those whose own
first and last tenth differ as much.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...model.columns import median
from ..thresholds import Thresholds, material
from ..wording import Finding

MAX_PAIRS_STEPS = 2000     # past this many steps the slopes come from an even sample of them (2 M pairs)


@dataclass(frozen=True)
class Trend:
    steps: int
    slope: float               # per step, in the values' unit (Theil-Sen)
    confidence: float          # 1 - p of Kendall's test (two-sided), 0..1
    first: float               # median of the first tenth of the steps
    last: float                # median of the last tenth
    median: float              # median of all steps

    @property
    def change(self) -> float:
        """The change from the first tenth to the last, as a share of the median (signed)."""
        return (self.last - self.first) / self.median if self.median else 0.0


def trend(values: np.ndarray) -> Trend | None:
    """The trend of ``values`` (one per step, in step order); None for fewer than 4 steps."""
    y = np.asarray(values, dtype=np.float64)
    n = y.size
    if n < 4:
        return None
    x = np.arange(n, dtype=np.float64)
    if n > MAX_PAIRS_STEPS:
        pick = np.linspace(0, n - 1, MAX_PAIRS_STEPS).round().astype(np.int64)
        x, y_s = x[pick], y[pick]
    else:
        y_s = y
    i, j = np.triu_indices(x.size, k=1)
    dy = y_s[j] - y_s[i]
    slope = float(median(dy / (x[j] - x[i])))
    s = float(np.sign(dy).sum())
    m = x.size
    var = m * (m - 1) * (2 * m + 5) / 18.0
    z = (abs(s) - 1) / math.sqrt(var) if var > 0 and s != 0 else 0.0     # with the continuity correction
    confidence = 1.0 - math.erfc(max(z, 0.0) / math.sqrt(2))
    tenth = max(1, n // 10)
    return Trend(steps=n, slope=slope, confidence=confidence, first=float(median(y[:tenth])),
                 last=float(median(y[-tenth:])), median=float(median(y)))


QUANTITIES = ("exposed_comm_ns", "duration_ns")      # the finding's verdicts: exposed-comm, step-time
CONTEXT = ("compute_ns", "wait_ns")                  # what the evidence adds: did compute or the wait grow?
LISTED = 10                                          # ranks listed per finding


def find(ranks, th: Thresholds, culprit: int | None = None) -> list:
    """The run's ``drift`` finding (at most one: exposed communication before step time), from the ranks'
    RankResults (their complete steps, in order); ``culprit``: the rank the others wait for, if any, named
    when the drift is mostly their wait."""
    series = [[s for s in r.steps if s.complete and s.step is not None] for r in ranks]
    n = min((len(x) for x in series), default=0)
    if n < max(th.drift_min_steps, 4):
        return []
    runs = {q: _run_series(series, n, q) for q in QUANTITIES}
    for q in QUANTITIES:
        y = runs[q]
        # The first and last tenth first (linear): the slope's pairs (quadratic) only where they differ enough.
        if y is None or abs(_change(y)) < th.drift_min_change:
            continue
        t = trend(y)
        if t is None or t.confidence < th.drift_min_confidence:
            continue
        trends = {k: trend(v) if v is not None else None
                  for k, v in {**runs, **{c: _run_series(series, n, c) for c in CONTEXT}}.items()}
        return [_finding(q, t, trends, ranks, series, n, th, culprit)]
    return []


def _change(y: np.ndarray) -> float:
    tenth = max(1, y.size // 10)
    mid = float(median(y))
    return (float(median(y[-tenth:])) - float(median(y[:tenth]))) / mid if mid else 0.0


def _run_series(series, n: int, q: str) -> np.ndarray | None:
    if any(getattr(s, q) is None for x in series for s in x[:n]):
        return None
    # Per step the median over ranks: sorted along the ranks, the middle one or two (np.median of a float
    # array would load numpy.ma).
    table = np.sort(np.array([[getattr(s, q) for s in x[:n]] for x in series], dtype=np.float64), axis=0)
    m = table.shape[0]
    return (table[(m - 1) // 2] + table[m // 2]) / 2


def _finding(q: str, t: Trend, trends: dict, ranks, series, n: int, th: Thresholds, culprit: int | None) -> Finding:
    tenth = max(1, n // 10)
    own = []
    for r, x in zip(ranks, series):
        change = _change(np.array([getattr(s, q) for s in x[:n]], dtype=np.float64))
        if abs(change) >= th.drift_min_change and np.sign(change) == np.sign(t.change):
            own.append((abs(change), r.rank, change))
    own.sort(key=lambda c: (-c[0], c[1]))
    step_ns = int(round(trends["duration_ns"].median)) if trends["duration_ns"] else 0
    impact = int(round(abs(t.last - t.first)))
    steps = series[0][:n]

    def summary(k: str) -> dict | None:
        c = trends.get(k)
        return None if c is None else {"first_ns": int(round(c.first)), "last_ns": int(round(c.last)),
                                       "change": c.change, "slope_ns": c.slope, "confidence": c.confidence}

    driver = _driver(q, t, trends)
    culprit = culprit if driver == "wait" else None
    evidence = {
        "quantity": q, "driver": driver, "culprit": culprit, "direction": "grew" if t.change > 0 else "shrank", "steps": n, "first_step": steps[0].step, "last_step": steps[-1].step, "tenth": tenth,
        "slope_ns": t.slope, "confidence": t.confidence, "first_ns": int(round(t.first)),
        "last_ns": int(round(t.last)), "median_ns": int(round(t.median)), "change": t.change,
        "min_change": th.drift_min_change, "min_confidence": th.drift_min_confidence,
        "inferred": any(r.steps_from == "inferred" for r in ranks), "ranks": len(ranks),
        "drifting_ranks": len(own), "listed_ranks": [{"rank": rk, "change": c} for _, rk, c in own[:LISTED]],
        **{k: summary(k) for k in ("exposed_comm_ns", "duration_ns", "compute_ns", "wait_ns")},
        "impact_ns": impact, "step_ns": step_ns, "material": material(th, impact, step_ns)}
    return Finding(id="drift", severity="warning" if evidence["material"] else "info",
                   rank=culprit if culprit is not None else own[0][1] if own else ranks[0].rank, step=None,
                   verdict="exposed-comm" if q == "exposed_comm_ns" else "step-time", evidence=evidence)


def _driver(q: str, t: Trend, trends: dict) -> str:
    """What the drift's change is mostly made of: for exposed communication the wait for peers or else the
    transfer (``unsplit`` when no collective was matched across ranks); for step time the compute or the
    exposed communication; ``unknown`` when no part carries half of it."""
    delta = t.last - t.first
    parts = ("wait_ns", "transfer") if q == "exposed_comm_ns" else ("compute_ns", "exposed_comm_ns")
    first = trends.get(parts[0])
    if q == "exposed_comm_ns" and first is None:
        return "unsplit"                     # one rank, or nothing matched: wait and transfer not split
    if first is not None and (first.last - first.first) * delta > 0 and abs(first.last - first.first) >= abs(delta) / 2:
        return parts[0].removesuffix("_ns").replace("_", "-")
    if q == "exposed_comm_ns":
        return "transfer"
    other = trends.get(parts[1])
    if other is not None and (other.last - other.first) * delta > 0 and abs(other.last - other.first) >= abs(delta) / 2:
        return "exposed-comm"
    return "unknown"


def find_in_collectives(collectives, th: Thresholds) -> list:
    """Drift without steps (ranks known from NCCL Inspector logs alone): the run's ``drift`` finding over the
    matched instances of one kind of collective (communicator, op and size, as an outlier's kind), in order of
    start. Per instance the series is the time a member spent in it, on average: the members' wait over their
    number plus the transfer, which the logs split exactly; of the kinds that drift, the one whose change, times
    its instances, is largest. What grew is told apart as for steps: the wait for a late member, else the
    transfer."""
    kinds: dict = {}
    for i, c in enumerate(collectives):
        if c.ranks:
            kinds.setdefault((c.pg, c.op, c.bytes), []).append(i)
    best = None
    for key, at in kinds.items():
        if len(at) < max(th.drift_min_steps, 4):
            continue
        wait = np.array([collectives[i].wait_ns / len(collectives[i].ranks) for i in at], dtype=np.float64)
        transfer = np.array([collectives[i].transfer_ns for i in at], dtype=np.float64)
        y = wait + transfer
        if abs(_change(y)) < th.drift_min_change:
            continue
        t = trend(y)
        if t is None or t.confidence < th.drift_min_confidence:
            continue
        weight = abs(t.last - t.first) * len(at)
        if best is None or weight > best[0]:
            best = (weight, key, at, t, trend(wait), trend(transfer))
    if best is None:
        return []
    _, (pg, op, size), at, t, wait, transfer = best
    delta = t.last - t.first
    driver = next((name for name, part in (("wait", wait), ("transfer", transfer))
                   if (part.last - part.first) * delta > 0 and abs(part.last - part.first) >= abs(delta) / 2),
                  "unknown")
    tenth = max(1, len(at) // 10)
    last_ranks = [collectives[i].last_rank for i in at[-tenth:] if collectives[i].last_rank is not None]
    culprit = None
    if driver == "wait" and last_ranks:
        # The member last at most of the last tenth's instances (the lowest rank of a tie): the one that came
        # later and later.
        counts = np.bincount(np.array(last_ranks, dtype=np.int64))
        culprit = int(np.argmax(counts))
    members = collectives[at[0]].ranks
    impact = int(round(abs(delta)))

    def summary(c: Trend) -> dict:
        return {"first_ns": int(round(c.first)), "last_ns": int(round(c.last)), "change": c.change,
                "slope_ns": c.slope, "confidence": c.confidence}

    median_ns = int(round(t.median))
    evidence = {
        "quantity": "collective_ns", "driver": driver, "culprit": culprit,
        "direction": "grew" if t.change > 0 else "shrank", "instances": len(at), "tenth": tenth,
        "pg": pg, "op": op, "bytes": size, "members": len(members), "slope_ns": t.slope,
        "confidence": t.confidence, "first_ns": int(round(t.first)), "last_ns": int(round(t.last)),
        "median_ns": median_ns, "change": t.change, "min_change": th.drift_min_change,
        "min_confidence": th.drift_min_confidence, "wait_ns": summary(wait), "transfer_ns": summary(transfer),
        "first_busbw_gbps": _busbw(collectives, at[:tenth]), "last_busbw_gbps": _busbw(collectives, at[-tenth:]),
        # The change per instance against the instance's own median time: no step to weigh it against.
        "impact_ns": impact, "material": material(th, impact, median_ns)}
    return [Finding(id="drift", severity="warning" if evidence["material"] else "info",
                    rank=culprit if culprit is not None else min(members), step=None, verdict="collective-time",
                    evidence=evidence)]


def _busbw(collectives, at: list) -> float | None:
    """The median busbw of these instances (null where none has one)."""
    got = [collectives[i].busbw_gbps for i in at if collectives[i].busbw_gbps is not None]
    return float(median(np.array(got, dtype=np.float64))) if got else None
