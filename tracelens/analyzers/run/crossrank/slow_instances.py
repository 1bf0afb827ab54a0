"""The slow instance that averages hide: one ``outlier`` finding per kind of collective that has any
(docs/metrics.md, "Outliers").

An instance is a collective matched across ranks, or one rank's collective that was not matched (a single
rank's trace, or a rank whose peers are missing). Its duration is its longest member's: the rank that waited
longest for the others, or every rank when the transfer itself was slow. Instances are grouped by operation,
size bucket and process group (``outliers.flag``); an outlier's excess over its group's median is put on the
wait for peers or on the transfer, whichever grew more than its own group median (the transfer is the
shortest member's time, the wait the rest: crossrank/waits.py). A wait names the rank the others waited
for. Without a match, wait and transfer cannot be told apart (``unknown``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....contract import OutlierKind
from ....model.columns import distinct
from ...thresholds import Thresholds, material
from ...wording import Finding
from ..outliers import flag, group_median, size_bucket
from .match import CollectiveRows

LISTED = 10                # outliers listed per finding, worst first
CAUSES = ("wait", "transfer", "early", "unknown")


@dataclass(frozen=True)
class Instances:
    """Per instance, what groups, flags and names it (int64 arrays; -1: unknown)."""

    op: np.ndarray             # op code (CollectiveRows.names["op"])
    pg: np.ndarray             # process-group code
    size: np.ndarray           # bytes
    matched: np.ndarray        # bool
    duration: np.ndarray       # the longest member's duration
    wait: np.ndarray           # that member's wait for the others (-1 unmatched)
    transfer: np.ndarray       # the instance's transfer time (-1 unmatched)
    rank: np.ndarray           # the rank named: the late rank of a matched instance, else its longest member
    late: np.ndarray           # bool: ``rank`` is the one the others waited for
    step: np.ndarray           # the named rank's step (-1: none)
    start: np.ndarray          # the named rank's start of it, on that rank's clock
    exposed: np.ndarray        # exposed time of the longest member
    lead: np.ndarray           # that member's lead (what it did since the ranks last met; arrival.py)
    slot: np.ndarray           # the same collective in every step: op, group, place among the group's
                               # collectives of that op in the step (and the rank, unmatched)

    def take(self, rows: np.ndarray) -> "Instances":
        return Instances(**{k: getattr(self, k)[rows] for k in self.__dataclass_fields__})


def instances(tab: CollectiveRows, ranks: np.ndarray, matched=None) -> Instances:
    """The instances of ``tab`` (``ranks``: the rank of each position); ``matched``: the crossrank
    ``Matched`` value, None when nothing was matched."""
    c = tab.cols
    loose = np.ones(len(tab), dtype=bool)
    parts = []
    first = np.empty(0, np.int64)
    if matched is not None and len(matched.m.starts):
        m, w = matched.m, matched.w
        rows, starts, first = m.rows, m.starts, matched.first
        loose[rows] = False
        d = c["end_ns"][rows]
        d -= c["start_ns"][rows]
        # The longest member of each instance (rows are grouped by instance, in order): the first row that
        # reaches its instance's maximum.
        top = np.flatnonzero(d == np.repeat(np.maximum.reduceat(d, starts), np.diff(np.append(starts, d.size))))
        longest = top[np.searchsorted(w.inst[top], np.arange(starts.size))]
        late = w.last >= 0
        named = rows[np.where(late, w.last, longest)]
        at = rows[longest]
        parts.append(dict(
            op=c["op"][first], pg=c["pg_name"][first], size=matched.size,
            matched=np.ones(starts.size, bool), duration=d[longest], wait=w.wait[longest], transfer=w.transfer,
            rank=ranks[tab.pos[named]], late=late, step=np.where(c["step"][named] >= 0, c["step"][named],
                                                                 matched.any_step), start=c["start_ns"][named],
            exposed=c["exposed_ns"][at], lead=c["lead_ns"][at]))
    solo = np.flatnonzero(loose)
    none = np.full(solo.size, -1, np.int64)
    parts.append(dict(
        op=c["op"][solo], pg=c["pg_name"][solo], size=c["bytes"][solo], matched=np.zeros(solo.size, bool),
        duration=c["end_ns"][solo] - c["start_ns"][solo], wait=none, transfer=none, rank=ranks[tab.pos[solo]],
        late=np.zeros(solo.size, bool), step=c["step"][solo], start=c["start_ns"][solo],
        exposed=c["exposed_ns"][solo], lead=c["lead_ns"][solo]))
    out = {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}
    # An instance's place among its kind in the step, on the rank of its first row (a matched instance's
    # lowest member, the same rank for every instance of a group), and the rank too when unmatched.
    own = np.concatenate([first, solo])
    place = _places(tab, own)
    pos = np.concatenate([np.full(first.size, -1, np.int64), tab.pos[solo]])
    keys = np.stack([out["matched"].astype(np.int64), out["op"], out["pg"], place, pos])
    out["slot"] = np.unique(keys, axis=1, return_inverse=True)[1].reshape(-1) if own.size else np.empty(0, np.int64)
    return Instances(**out)


def _places(tab: CollectiveRows, rows: np.ndarray) -> np.ndarray:
    """Per row of ``rows``: its place among those of them of the same rank, group and op in its step, by start
    (the same collective of every step has the same place)."""
    c = tab.cols
    n = rows.size
    if not n:
        return np.empty(0, np.int64)
    keys = (tab.pos[rows], c["pg_name"][rows], c["op"][rows], c["step"][rows])
    order = np.lexsort((c["start_ns"][rows], *keys[::-1]))
    new = np.ones(n, dtype=bool)
    new[1:] = np.any([np.diff(k[order]) != 0 for k in keys], axis=0)
    first = np.flatnonzero(new)
    out = np.empty(n, np.int64)
    out[order] = np.arange(n) - first[np.cumsum(new) - 1]
    return out


def _per_slot(x: Instances, values: np.ndarray, wanted: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per instance: the median of ``values`` over the instances of its slot where ``wanted``, and how many
    those are (only instances in a step count: a whole capture has one of each)."""
    use = wanted & (x.step >= 0)
    n = int(x.slot.max()) + 1 if x.slot.size else 0
    count = np.bincount(x.slot[use], minlength=n)
    median = group_median(values[use], x.slot[use], n)
    return median[x.slot], count[x.slot]


def find(tab: CollectiveRows, ranks: np.ndarray, results, th: Thresholds,
         matched=None) -> tuple[list[Finding], list[OutlierKind]]:
    """One ``outlier`` finding per group of instances with any, and the group's instances for the outliers
    view (``results``: the ranks' RankResults, in the order of ``ranks``, whose steps price an outlier per
    step)."""
    if not len(tab):
        return [], []
    x = instances(tab, ranks, matched)
    # Without its size an instance has no kind: a large message cannot be told from a slow one.
    x = x.take(np.flatnonzero(x.size > 0))
    if not x.size.size:
        return [], []
    keys = np.stack([x.matched.astype(np.int64), x.op, size_bucket(x.size), x.pg])
    group = np.unique(keys, axis=1, return_inverse=True)[1].reshape(-1)
    f = flag(x.duration, group, k=th.outlier_k, floor_ns=th.outlier_min_excess_ns, min_group=th.outlier_min_group)
    # A collective slow in most steps is no outlier: it is the run's pattern (a rank late every step is the
    # verdict's culprit), not the one slow instance a median hides.
    _, seen = _per_slot(x, x.duration, np.ones(x.size.size, bool))
    flagged = np.bincount(x.slot[f.outlier & (x.step >= 0)], minlength=int(x.slot.max()) + 1)[x.slot]
    outlier = f.outlier & ~((seen >= 3) & (2 * flagged > seen))
    if not outlier.any():
        return [], []
    n = int(group.max()) + 1
    excess = x.duration - f.median_ns
    wait_over = x.wait - group_median(x.wait, group, n)[group]
    transfer_over = x.transfer - group_median(x.transfer, group, n)[group]
    # One rank's own trace cannot split wait from transfer, but it shows when the rank came early: a lead
    # shorter than the same collective's usual one (its median over the steps) by half the excess or more
    # means it waited for peers that came as usual, and that wait only replaced time it usually spends before.
    usual, steps_seen = _per_slot(x, x.lead, x.lead >= 0)
    usual = np.where((steps_seen >= 3) & (x.lead >= 0), np.floor(usual), -1).astype(np.int64)
    early = usual >= 0
    short = np.where(early, usual - x.lead, 0)
    cause = np.where(x.matched, np.where(wait_over > transfer_over, "wait", "transfer"),
                     np.where(early & (2 * short >= excess), "early", "unknown"))
    priced = np.where(cause == "early", np.maximum(excess - np.maximum(short, 0), 0), excess)
    found, kinds = [], []
    for g in distinct(group[outlier]).tolist():
        members = np.flatnonzero(group == g)
        found.append(_finding(x, np.flatnonzero((group == g) & outlier), members, excess, priced, cause, usual, f,
                              _steps(results), tab.names, th))
        kinds.append(_kind(x, members[np.lexsort((members, x.start[members]))], outlier, cause, f, tab.names))
    return found, kinds


def _kind(x: Instances, rows: np.ndarray, outlier: np.ndarray, cause: np.ndarray, f, names: dict) -> OutlierKind:
    first = int(rows[0])
    op, pg = int(x.op[first]), int(x.pg[first])
    return OutlierKind(
        op=names["op"][op] if op >= 0 else None, pg=names["pg_name"][pg] if pg >= 0 else None,
        bytes_min=int(x.size[rows].min()), bytes_max=int(x.size[rows].max()), matched=bool(x.matched[first]),
        median_ns=int(f.median_ns[first]), limit_ns=int(f.limit_ns[first]), rank=x.rank[rows].tolist(),
        step=[None if s < 0 else s for s in x.step[rows].tolist()], start_ns=x.start[rows].tolist(),
        duration_ns=x.duration[rows].tolist(),
        cause=[str(c) if o else None for c, o in zip(cause[rows].tolist(), outlier[rows].tolist())])


def _steps(results) -> tuple[int, int]:
    """The run's steps per rank and step time: medians over ranks (of the count, and of each rank's median
    complete step)."""
    counts = [len(r.steps) for r in results]
    times = [int(np.median([s.duration_ns for s in (done or r.steps)]))
             for r in results for done in [[s for s in r.steps if s.complete]] if r.steps]
    return int(np.median(counts)) if counts else 0, int(np.median(times)) if times else 0


def _finding(x: Instances, hit: np.ndarray, members: np.ndarray, excess: np.ndarray, priced: np.ndarray,
             cause: np.ndarray, usual: np.ndarray, f, run: tuple[int, int], names: dict,
             th: Thresholds) -> Finding:
    steps, step_ns = run
    hit = hit[np.lexsort((hit, -excess[hit]))]                 # worst first
    worst = int(hit[0])
    exposed_excess = np.minimum(priced[hit], np.maximum(x.exposed[hit], 0))
    per_step = int(exposed_excess.sum()) // max(steps, 1)
    listed = [{"rank": int(x.rank[i]), "step": None if x.step[i] < 0 else int(x.step[i]), "start_ns": int(x.start[i]),
               "duration_ns": int(x.duration[i]), "excess_ns": int(excess[i]), "cause": str(cause[i]),
               "lead_ns": None if x.lead[i] < 0 else int(x.lead[i]),
               "usual_lead_ns": None if usual[i] < 0 else int(usual[i]),
               "late_rank": bool(x.late[i]), "wait_ns": None if x.wait[i] < 0 else int(x.wait[i]),
               "transfer_ns": None if x.transfer[i] < 0 else int(x.transfer[i])} for i in hit[:LISTED].tolist()]
    causes = {k: int((cause[hit] == k).sum()) for k in CAUSES if (cause[hit] == k).any()}
    late = x.rank[hit][(cause[hit] == "wait") & x.late[hit]]
    named, times = np.unique(late, return_counts=True)
    op, pg = int(x.op[worst]), int(x.pg[worst])
    size = x.size[members][x.size[members] > 0]
    evidence = {
        "op": names["op"][op] if op >= 0 else None, "pg": names["pg_name"][pg] if pg >= 0 else None,
        "bytes_min": int(size.min()) if size.size else None, "bytes_max": int(size.max()) if size.size else None,
        "matched": bool(x.matched[worst]), "instances": int(members.size), "outliers": int(hit.size),
        "median_ns": int(f.median_ns[worst]), "limit_ns": int(f.limit_ns[worst]),
        "k": th.outlier_k, "min_excess_ns": th.outlier_min_excess_ns, "causes": causes,
        "late_ranks": {int(r): int(t) for r, t in zip(named.tolist(), times.tolist())},
        # Exposure is unknown where no member's exposed time is (ranks from NCCL Inspector logs: no compute).
        "excess_ns": int(excess[hit].sum()),
        "exposed_excess_ns": None if (x.exposed[hit] < 0).all() else int(exposed_excess.sum()),
        "steps": steps, "step_ns": step_ns, "cost_per_step_ns": per_step, "impact_ns": per_step,
        "material": material(th, per_step, step_ns), "worst": listed[0], "listed": listed}
    severity = "warning" if evidence["material"] else "info"
    return Finding(id="outlier", severity=severity, rank=int(x.rank[worst]),
                   step=None if x.step[worst] < 0 else int(x.step[worst]), verdict=str(cause[worst]),
                   evidence=evidence)

