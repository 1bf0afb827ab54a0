"""The rank the others wait for, and why it is late (docs/metrics.md, "Stragglers" and "The culprit's reason").

Each matched instance with a last rank (on aligned clocks; where a member's clock could not be aligned, the
member that waited least, when the others all waited at least straggler_min_skew_ns: a blocking collective
ends together on every member, so the last to arrive waits least) *causes* the other members' waits. The
rank that causes the most waiting is the straggler (the culprit of the run verdict's peer-wait) when it
causes at least straggler_min_late_share of all the waiting and is last at straggler_min_late_count
instances or more. Step times are never compared while collectives are matched: the ranks that wait have the
longest steps.

Why it is late is read from what it did before its late collectives: each member's lead since the ranks last
met (analyzers/rank/arrival.py: compute, sync-stall idle, late-launch idle, host-gap idle) at the same
instances, read per step at its peak (the late collective the others waited at longest: see _peaks). Per
component, the culprit's sum over its peaks minus the sum of the other members' medians is its excess. How
late it was is the median of the other members' waits at each peak (clock-free: a member waits as long as the
last one came after it). The largest positive excess that explains at least
straggler_min_reason_share of that lateness (and of the excess lead) names the reason, else ``unknown``: then
the lateness arose before the lead, e.g. before the capture's first collective.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import numpy as np

from ...thresholds import Thresholds, material
from ...wording import Finding
from ..outliers import group_median

REASONS = ("compute", "sync-stall", "late-launch", "host-gap")
_COMPONENT = {"compute": "lead_compute_ns", "sync-stall": "lead_sync_ns", "late-launch": "lead_launch_ns",
              "host-gap": "lead_host_ns"}


@dataclass
class CulpritFound:
    pos: int                   # position of the rank in the ordered analyses
    reason: str                # compute | host-gap | sync-stall | late-launch | unknown
    finding: Finding
    # Per step of the late rank: what the step would lose if it came on time (see saving_by_step); a step at
    # which it was late nowhere saves 0.
    saving_by_step: dict = None


def late_rows(last: np.ndarray, skew: np.ndarray, wait: np.ndarray, starts: np.ndarray, trusted: np.ndarray,
              th: Thresholds) -> np.ndarray:
    """Per instance, the matched row of the rank the others waited for (-1: none): the last to arrive on
    aligned clocks; where the clocks are not trusted, the member that waited least while every other member
    waited at least straggler_min_skew_ns."""
    n = len(starts)
    out = np.where(skew >= th.straggler_min_skew_ns, last, -1)
    loose = np.flatnonzero(~trusted)
    if not loose.size:
        return out
    rows = len(wait)
    cnt = np.diff(np.append(starts, rows))
    # Only the instances with a member whose clock is not aligned: their rows, grouped by instance.
    take = np.concatenate([np.arange(starts[i], starts[i] + cnt[i]) for i in loose.tolist()])
    sub_cnt = cnt[loose]
    sub_starts = np.cumsum(sub_cnt) - sub_cnt
    inst = np.repeat(np.arange(loose.size), sub_cnt)
    w = wait[take]
    order = np.lexsort((w, inst))               # by instance, least wait first
    first = order[sub_starts]                   # the least-waiting member's row (in ``take``)
    second = np.where(sub_cnt >= 2, w[order[np.minimum(sub_starts + 1, take.size - 1)]], -1)
    by_wait = (sub_cnt >= 2) & (second >= th.straggler_min_skew_ns) & (w[first] < second)
    out[loose] = np.where(by_wait, take[first], -1)
    return out


@dataclass
class Arrivals:
    """Who came last at each matched instance, and what the straggler is judged on."""

    pos: np.ndarray            # per matched row: its rank's position
    wait: np.ndarray           # per matched row: its wait
    lead: dict                 # per matched row: the lead columns (seam.LEAD_COLUMNS)
    starts: np.ndarray         # per instance: its first matched row
    members: np.ndarray        # per instance: its member count
    rows_late: np.ndarray      # per instance: the row of the rank the others waited for (-1: none)
    skew: np.ndarray           # per instance: the arrival skew (-1: unknown)
    caused: np.ndarray         # per instance: the other members' summed wait
    step: np.ndarray           # per instance: the late rank's step
    delay: np.ndarray          # per instance: the late kernel's start minus its launch (-1: unknown)
    first_start: list          # per rank position: its first step's start, aligned (None: clock not aligned)
    # Per matched row: whether its rank's leads were measured (a rank known from NCCL Inspector logs has none:
    # its zeros must not pull the other members' median down). None: every rank's were.
    known: np.ndarray | None = None


def find(results, arr: Arrivals, cpu: bool, th: Thresholds, exposed: dict | None = None) -> CulpritFound | None:
    """The rank the others wait for, if one is (``results``: the ranks' results in position order; ``cpu``:
    every rank ran on a CPU backend; ``exposed``: {(position, step): the exposed wait of that rank's step},
    waits.per_rank's)."""
    pos, rows_late, skew, caused, step, delay = arr.pos, arr.rows_late, arr.skew, arr.caused, arr.step, arr.delay
    members, starts, lead, wait, first_start = arr.members, arr.starts, arr.lead, arr.wait, arr.first_start
    has = rows_late >= 0
    if not has.any():
        return None
    late_pos = np.where(has, pos[np.maximum(rows_late, 0)], -1)
    n_ranks = len(results)
    weight = np.where(has, caused, 0).astype(np.float64)
    by_rank = np.bincount(late_pos[has], weights=weight[has], minlength=n_ranks)
    counts = np.bincount(late_pos[has], minlength=n_ranks)
    total = float(weight.sum())
    if total <= 0:
        return None
    late = int(np.argmax(by_rank))
    wait_share = by_rank[late] / total
    if wait_share < th.straggler_min_late_share or counts[late] < th.straggler_min_late_count:
        return None
    mine = has & (late_pos == late)
    steps = step[mine]
    by_step: dict = {}
    for s, c in zip(steps.tolist(), caused[mine].tolist()):
        by_step[s] = by_step.get(s, 0) + c
    caused_total = int(caused[mine].sum())
    others = max(float(np.mean(members[mine])) - 1, 1.0)
    waited = int(round(caused_total / others / max(len(by_step), 1)))     # one other rank's wait per step
    # What the waiting costs is the part no compute hid: one other rank's exposed wait per step (the median
    # over the other ranks of each one's mean). A wait all under compute shortens no step.
    felt = _others_exposed(exposed or {}, late, n_ranks, list(by_step))
    impact = int(round(statistics.median([statistics.fmean(v.values()) for v in felt.values() if v] or [0])))
    peaks = _peaks(np.flatnonzero(mine), step, caused)
    excess, mine_sum, theirs_sum = _lead_excess(peaks, starts, len(pos), rows_late, {**lead, "wait": wait},
                                                arr.known)
    saving = saving_by_step(np.flatnonzero(mine), starts, len(pos), rows_late, lead, wait, step,
                            [s.step for s in (x for x in results[late].steps if x.complete)],
                            _exposed_comm(results, late), arr.known)
    lateness = theirs_sum.pop("wait")
    excess.pop("wait"), mine_sum.pop("wait")
    reason = "unknown"
    ranked = sorted(REASONS, key=lambda k: (-excess[k], REASONS.index(k)))
    top = excess[ranked[0]]
    # A reason must explain the lateness: the late rank took longer than the others to arrive since they last
    # met (its excess lead is a good share of how late it came), and one activity is a good share of that.
    share = th.straggler_min_reason_share
    if excess["lead"] >= share * lateness and top > 0 and top >= share * excess["lead"]:
        reason = ranked[0]
    others_start = [v for i, v in enumerate(first_start) if i != late and v is not None]
    late_start = None if first_start[late] is None or not others_start else \
        int(round(first_start[late] - statistics.median(others_start)))
    if late_start is not None and late_start <= 0:
        late_start = None                   # it did not begin later: nothing to say about it
    known = delay[mine] >= 0
    prompt = int((known & (delay[mine] <= th.launch_prompt_ns)).sum())
    # A rank known from logs has no step to measure: it says nothing of the step time.
    ranks_step = statistics.median([_mean_step(r) for i, r in enumerate(results) if i != late and r.steps] or [0])
    important = material(th, impact, int(ranks_step))
    skewed = skew[mine]
    def mean(v):
        return int(round(v / len(peaks)))

    evidence = {
        "late_count": int(counts[late]), "instances": int(has.sum()), "late_share": float(counts[late] / has.sum()),
        "wait_share": float(wait_share), "mean_skew_ns": int(round(float(skewed[skewed >= 0].mean())))
        if (skewed >= 0).any() else None,
        "caused_wait_ns": caused_total,
        "caused_wait_by_step": [[None if s < 0 else s, ns] for s, ns in sorted(by_step.items())],
        # Means over the steps' peaks (the late collective of each step the others waited at longest): leads of
        # later collectives of a step overlap (they run from the same point).
        "reason": reason, "lateness_ns": mean(lateness), "late_start_ns": late_start, "lead_ns": mean(mine_sum["lead"]),
        "ranks_lead_ns": mean(theirs_sum["lead"]), "excess_ns": {k: mean(excess[k]) for k in ("lead", *REASONS)},
        "lead_by_reason_ns": {k: mean(mine_sum[k]) for k in REASONS},
        "ranks_lead_by_reason_ns": {k: mean(theirs_sum[k]) for k in REASONS},
        "launched_promptly": prompt, "launch_known": int(known.sum()), "cpu": cpu,
        "ranks": n_ranks, "wait_per_step_ns": waited, "impact_ns": impact, "step_ns": int(ranks_step),
        "material": important}
    finding = Finding(id="straggler", severity="warning" if important else "info", rank=results[late].rank,
                      step=None, verdict=reason, evidence=evidence)
    return CulpritFound(pos=late, reason=reason, finding=finding, saving_by_step=saving)


def _others_exposed(exposed: dict, late: int, n_ranks: int, steps: list) -> dict:
    """Per other rank position, {step: its exposed wait} over the given steps it has."""
    return {p: {s: exposed[p, s] for s in steps if (p, s) in exposed} for p in range(n_ranks) if p != late}


def _exposed_comm(results, late: int) -> dict:
    """Per step: the median over the other ranks of their exposed communication in it. Coming on time moves
    only the collectives, so no rank's step can shorten by more than that: a wait all under compute saves
    nothing, while a wait partly under compute can save more than its exposed part (the transfer after it
    moves under compute too)."""
    by_step: dict = {}
    for p, r in enumerate(results):
        if p != late:
            for s in r.steps:
                by_step.setdefault(s.step, []).append(s.exposed_comm_ns)
    return {s: statistics.median(v) for s, v in by_step.items()}


def saving_by_step(instances: np.ndarray, starts: np.ndarray, n_rows: int, rows_late: np.ndarray, lead: dict,
                   wait, step: np.ndarray, steps: list, exposed: dict | None = None,
                   known: np.ndarray | None = None) -> dict:
    """Per step of the late rank (``steps``, its complete steps), what every rank's step would lose if the
    late rank came on time at its late ``instances``: how much more of its own time it spent since the ranks
    last met than the others did, at the step's last late collective (the one its lead covers most of),
    bounded by the waits it caused in the step (the other members' median wait, summed over the step's late
    collectives) and by the other ranks' median exposed communication in the step (``exposed``; see
    _exposed_comm). A step it was late nowhere saves 0.

    Its own time is its lead's parts (compute, sync-stall, late-launch and host-gap idle), each less the
    other members' median. A part where it spent less than the others counts against it only for compute:
    the others' compute is work of their own that would make one of them last once it came on time (a gloo
    rank that computes 6 ms less saves 6 ms less than its delay), while their idle is where the waiting it
    caused shows up (on a GPU the others compute on while their collectives wait, then idle).

    A step saves the late rank's typical lateness at most (see the end: the rest is noise that stays).
    ``known``: per matched row, whether its leads were measured (Arrivals.known)."""
    if not steps:           # a rank known from logs has no steps: nothing to save in them, nothing to gather
        return {}
    rows, inst, me, others = _members(instances, starts, n_rows, rows_late)
    measured = others if known is None else others & known[rows]
    total = np.zeros(len(instances), dtype=np.float64)
    for k, col in _COMPONENT.items():
        values = np.asarray(lead[col], dtype=np.int64)
        excess = values[me] - group_median(values[rows[measured]], inst[measured], len(instances))
        total += excess if k == "compute" else np.maximum(excess, 0.0)
    own = np.asarray(lead["lead_ns"], dtype=np.int64)[me]
    w = np.asarray(wait, dtype=np.int64)
    late = group_median(w[rows[others]], inst[others], len(instances))
    out = dict.fromkeys(steps, 0)
    at = step[instances]
    for s in out:
        here = np.flatnonzero(at == s)
        if here.size:
            last = here[np.argmax(own[here])]
            bound = float(late[here].sum())
            if exposed is not None:
                bound = min(bound, float(exposed.get(s, 0)))
            out[s] = int(round(max(0.0, min(float(total[last]), bound))))
    # Coming later than its typical lateness is the arrival noise every rank has: once on time, the ranks
    # still arrive apart and the last of them still holds the step, so a step saves its typical lateness at
    # most. With a fixed delay d and noise n symmetric between the ranks, a step saves min(d + n, d): the
    # median over the steps it was late in is d, and the mean of the capped steps is the expected saving.
    late_in = [v for v in out.values() if v > 0]
    if late_in:
        typical = int(round(statistics.median(late_in)))
        out = {s: min(v, typical) for s, v in out.items()}
    return out


def _peaks(instances: np.ndarray, step: np.ndarray, caused: np.ndarray) -> np.ndarray:
    """Per step, the one of its late ``instances`` where the others waited longest (the first of equals).

    Later collectives of a step lead from the same point, so their leads hold what came after the lateness
    arose, and on CPU backends the others' leads there hold their own blocked waits for the late rank (the
    training thread sits in the earlier collective's call): read there, the waiting it caused shows as the
    others' host gaps and its own delay as compute. Where it kept them waiting longest is where it was late
    for its reason."""
    order = np.lexsort((instances, -caused[instances], step[instances]))
    ranked = instances[order]
    s = step[ranked]
    first = np.ones(len(ranked), dtype=bool)
    first[1:] = s[1:] != s[:-1]
    return np.sort(ranked[first])


def _members(instances: np.ndarray, starts: np.ndarray, n_rows: int, rows_late: np.ndarray):
    """The matched rows of the given instances, each row's instance (0..), the late rank's row per instance,
    and which rows are the other members'."""
    cnt = np.diff(np.append(starts, n_rows))
    rows = np.concatenate([np.arange(starts[i], starts[i] + cnt[i]) for i in instances.tolist()]) \
        if len(instances) else np.empty(0, np.int64)
    inst = np.repeat(np.arange(len(instances)), cnt[instances])
    me = rows_late[instances]
    return rows, inst, me, rows != me[inst]


def _lead_excess(instances: np.ndarray, starts: np.ndarray, n_rows: int, rows_late: np.ndarray, lead: dict,
                 known: np.ndarray | None = None):
    """Summed over the given instances: the late rank's lead components, the other members' medians, and the
    difference (ints, ns)."""
    keys = {"lead": "lead_ns", **_COMPONENT, **({"wait": "wait"} if "wait" in lead else {})}
    rows, inst, me, others = _members(instances, starts, n_rows, rows_late)
    measured = others if known is None else others & known[rows]
    mine, theirs = {}, {}
    for k, col in keys.items():
        values = np.asarray(lead[col], dtype=np.int64)
        mine[k] = int(values[me].sum())
        # How late it came is the wait of every other member, logged or traced; what it did before, only
        # against the members whose leads were measured.
        sel = others if k == "wait" else measured
        theirs[k] = int(round(float(group_median(values[rows[sel]], inst[sel], len(instances)).sum())))
    return {k: mine[k] - theirs[k] for k in keys}, mine, theirs


def _mean_step(r) -> float:
    done = [s for s in r.steps if s.complete] or r.steps
    return sum(s.duration_ns for s in done) / len(done) if done else 0.0
