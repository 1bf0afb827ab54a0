"""The run verdict: why communication is exposed, the culprit, and what fixing each cause buys (docs/metrics.md,
"The run verdict").

Every rank's exposed communication is split into
- ``peer-wait``: exposed time inside the wait for the last rank to arrive at a matched collective
  (steps[*].exposed_wait_ns, analyzers/run/crossrank/waits.py); no overlap can hide it, only the late rank
  arriving sooner. It carries the culprit (crossrank/straggler.py) where one rank causes most of the waiting;
- ``not-overlapped``: the rest of the exposed time, where the transfer itself ran with no compute beside it
  (and collectives not matched across ranks), with the overlap pattern of the steps it is material in;
- ``overlap-tax``: compute slowed by the communication beside it, at the low end of its interval
  (steps[*].overlap_tax_low_ns: a tax the evidence does not support is not ranked).

A cause costs, per step, the median over ranks of each rank's mean per step (in synchronous training every
rank's step takes as long as the slowest rank's, so the typical rank says what the run loses), and its share
is that over the median of the ranks' mean step times. Causes are sorted by cost; the headline names the
biggest one when it is material (thresholds.material), with the culprit and its reason.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace

from ...contract import Cause, Culprit, RankResult, Transport, Verdict
from ..thresholds import Thresholds, material
from ..verdicts import majority
from ..wording import headline, lever

_ORDER = ("peer-wait", "not-overlapped", "overlap-tax")
_TCP = ("tcp_silent_fallback", "tcp_no_rdma")


def verdict(ranks: list[RankResult], *, matched: bool, culprit: Culprit | None, transport: Transport | None,
            dimension: str | None, th: Thresholds, culprit_saving: dict | None = None,
            logs_alone: str | None = None, untraced: tuple = (), crowded: tuple | None = None) -> Verdict:
    """``matched``: collectives were matched across ranks (peer-wait is measured); ``dimension``: the
    parallelism dimension with the most exposed communication; ``culprit_saving``: per step of the culprit,
    what its coming on time would save (crossrank/straggler.saving_by_step); ``logs_alone``: the network
    transport finding's title when the run is NCCL logs without a trace (then that is its answer);
    ``untraced``: the ranks known from NCCL Inspector logs only (none of their numbers is in ``ranks``);
    ``crowded``: (ranks, cores) of a host whose ranks outnumber its cores, where the inputs say so."""
    rows = [_per_step(r) for r in ranks]
    rows = [x for x in rows if x is not None]
    if not rows or not any(x["comm"] for x in rows):
        return Verdict(headline=headline(None, None, None, logs_alone=logs_alone), causes=[])
    step = statistics.median(x["step"] for x in rows)
    causes = []
    spans = {}
    cpu = all(r.mode == "cpu" for r in ranks)
    tcp = transport is not None and transport.verdict in _TCP
    for name in _ORDER:
        if name == "peer-wait" and not matched:
            continue
        key = {"peer-wait": "wait", "not-overlapped": "rest", "overlap-tax": "tax"}[name]
        ns = int(round(statistics.median(x[key] for x in rows)))
        where = [x["rank"] for x in rows if material(th, int(round(x[key])), int(round(x["step"])))]
        pattern = _pattern(ranks, th) if name == "not-overlapped" else None
        who = culprit if name == "peer-wait" else None
        saved, note = _saving(name, ranks, who, culprit_saving, cpu, pattern, dimension, untraced,
                              crowded if cpu else None)
        causes.append(Cause(cause=name, ns_per_step=ns, share_of_step=ns / step if step > 0 else None, ranks=where,
                            culprit=who, pattern=pattern,
                            # Advice for a cause material nowhere would be noise, even with a culprit: a
                            # wait all under compute costs nothing to remove.
                            lever=lever(name, who, pattern, dimension, tcp and name == "not-overlapped", cpu,
                                        untraced)
                            if where else "",
                            saving_ns=None if saved is None else saved[0],
                            saving_low_ns=None if saved is None else saved[1],
                            saving_high_ns=None if saved is None else saved[2], saving_note=note))
        # What the cause is worth, and its interval: the saving where the trace tells it, else the cost.
        spans[name] = saved if saved is not None else _cost_span(rows, key, ns)
    causes.sort(key=lambda c: (-spans[c.cause][0], _ORDER.index(c.cause)))
    top = causes[0]
    waiting = [x["rank"] for x in rows if material(th, int(round(x["wait"])), int(round(x["step"])))]
    biggest = top if material(th, spans[top.cause][0], int(round(step))) else None
    # A second cause whose interval reaches the first's is as likely the bigger one: the headline names both.
    tie = None
    if biggest is not None and len(causes) > 1:
        second = causes[1]
        if material(th, spans[second.cause][0], int(round(step))) and spans[second.cause][2] >= spans[top.cause][1]:
            tie = second
    return Verdict(headline=headline(biggest, top, waiting, tcp=tcp, step_ns=step, also=tie, cpu=cpu,
                                     untraced=untraced),
                   causes=causes)


# A two-sided 90 % interval of a mean: 1.645 standard errors either side.
_Z90 = 1.645
_NO_CULPRIT = ("no single rank arrives last (the arrival order moves between ranks): no one change removes "
               "the waiting, so the trace cannot say what it would save")
_CPU_TRANSFERS = ("CPU ranks: the transfers run on the cores the compute uses (gloo's threads), so hiding them "
                  "frees time only where cores sit idle, which the trace does not show")


def _interval(values) -> tuple[int, int, int] | None:
    """(mean, low, high) of per-step values: the mean and 1.645 standard errors either side (0 at the least)."""
    v = [float(x) for x in values]
    if not v:
        return None
    mean = statistics.fmean(v)
    half = _Z90 * statistics.stdev(v) / math.sqrt(len(v)) if len(v) > 1 else 0.0
    return int(round(mean)), max(0, int(round(mean - half))), int(round(mean + half))


def _saving(name: str, ranks: list[RankResult], culprit: Culprit | None, by_step: dict | None, cpu: bool,
            pattern: str | None = None, dimension: str | None = None, untraced: tuple = (),
            crowded: tuple | None = None):
    """What removing a cause saves per step, as (mean, low, high), and None; or None and why the trace cannot
    tell (docs/metrics.md, "What fixing a cause saves")."""
    if name == "peer-wait":
        if culprit is None:
            return None, _NO_CULPRIT
        if culprit.rank in untraced:
            return None, (f"rank {culprit.rank} has no trace: what it did before arriving, and so what its coming "
                          "on time would save, is not in its NCCL Inspector log")
        if not by_step:
            return None, f"rank {culprit.rank} has no complete step to measure its lateness in"
        if crowded is not None:
            # Re-runs of 4 gloo ranks on 2 cores: a rank sleeping 40 ms a step cost the step 3 ms, not the
            # 26 ms of lateness it showed (bench/RESULTS.md, "Predictions against re-runs").
            return None, (f"CPU ranks outnumber their cores ({crowded[0]} ranks on {crowded[1]} of one host): "
                          f"while rank {culprit.rank} is late the others compute on its core, so its coming on "
                          "time frees less than its lateness, by how much the trace does not show")
        return _interval(by_step.values()), None
    if name == "not-overlapped":
        if cpu:
            return None, _CPU_TRANSFERS
        # Per rank and step, the exposed transfer that the lever lets compute hide: never more than the step's
        # time beyond its compute (a step cannot get shorter than its compute).
        per_rank = [[max(0, min(s.exposed_comm_ns - (s.exposed_wait_ns or 0) - _stays(r, pattern, dimension),
                                s.duration_ns - s.compute_ns))
                     for s in ([s for s in r.steps if s.complete] or r.steps)] for r in ranks]
        per_rank = [v for v in per_rank if v]
        return _centred(per_rank), None
    per_rank = [[s.overlap_tax_low_ns for s in ([s for s in r.steps if s.complete] or r.steps)] for r in ranks]
    low = _median_of_means(per_rank)
    high = _median_of_means([[s.overlap_tax_high_ns for s in ([s for s in r.steps if s.complete] or r.steps)]
                             for r in ranks])
    return (low, low, max(low, high)), None


def _stays(r: RankResult, pattern: str | None, dimension: str | None) -> int:
    """What of a rank's exposed transfer stays exposed once the lever is pulled, where its bucket model tells
    (analyzers/rank/wfbp.py): collectives moved to their own stream still expose what wait-free backprop
    leaves of its buckets (the last one's transfer at least); a data-parallel step given the suggested
    bucket cap exposes what the model predicts for it. Else 0: all of it could run under compute, the bound
    of perfect overlap."""
    m = r.bucket_model
    if m is None:
        return 0
    if pattern == "serialized":
        return m.model_exposed_ns
    if dimension == "dp" and pattern != "two-phase" and m.suggested_exposed_ns is not None:
        return min(m.suggested_exposed_ns, m.observed_exposed_ns)
    return 0


def _median_of_means(per_rank: list[list[int]]) -> int:
    means = [statistics.fmean(v) for v in per_rank if v]
    return int(round(statistics.median(means))) if means else 0


def _centred(per_rank: list[list[int]]) -> tuple[int, int, int] | None:
    """The median over ranks of each rank's mean, with the interval the spread over all ranks' steps gives."""
    if not per_rank:
        return None
    point = _median_of_means(per_rank)
    mean, low, high = _interval([x for v in per_rank for x in v])
    return point, max(0, point - (mean - low)), point + (high - mean)


def _cost_span(rows: list[dict], key: str, ns: int) -> tuple[int, int, int]:
    """A cause's cost with the interval the spread of its ranks' means gives (for telling causes apart)."""
    values = [x[key] for x in rows]
    if len(values) < 2:
        return ns, ns, ns
    half = _Z90 * statistics.stdev(values) / math.sqrt(len(values))
    return ns, max(0, int(round(ns - half))), int(round(ns + half))


def _per_step(r: RankResult) -> dict | None:
    """A rank's mean per step: step time, exposed wait, the rest of its exposed time and its overlap tax."""
    steps = [s for s in r.steps if s.complete] or r.steps
    if not steps:
        return None
    n = len(steps)
    wait = sum(s.exposed_wait_ns or 0 for s in steps)
    exposed = sum(s.exposed_comm_ns for s in steps)
    return {"rank": r.rank, "step": sum(s.duration_ns for s in steps) / n, "wait": wait / n,
            "rest": (exposed - wait) / n, "tax": sum(s.overlap_tax_low_ns for s in steps) / n,
            "comm": sum(s.comm_ns for s in steps)}


def _pattern(ranks: list[RankResult], th: Thresholds) -> str | None:
    """The majority pattern of the steps whose exposed time beyond the wait is material."""
    shapes = [s.pattern for r in ranks for s in r.steps
              if material(th, s.exposed_comm_ns - (s.exposed_wait_ns or 0), s.duration_ns)]
    return majority(shapes)[0]


# Findings whose advice acts on the rank's own overlap (buckets, launches, streams, prefetching): for time spent
# waiting for another rank it would change nothing.
_OWN_OVERLAP = ("overlap-pattern", "launch-order", "bucket-size", "parallelism")


def point_at_culprit(findings: list, ranks: list[RankResult], culprit: int | None, th: Thresholds) -> list:
    """Where most of what a finding is about is the wait for a late rank (its step's exposed wait, or the
    rank's over all steps for a finding of the whole rank), its evidence says so (``peer_wait``: the wait,
    the exposed time it is part of, the rank waited for) and it is info at most: its wording then points at
    that rank instead of advising buckets or launches. The findings as given, those changed as copies (the
    analyses a report is combined from are never changed)."""
    by_step = {(r.rank, s.step): s for r in ranks for s in r.steps}
    totals = {r.rank: r for r in ranks}
    out = list(findings)
    for i, f in enumerate(findings):
        if f.id not in _OWN_OVERLAP or f.rank == culprit:
            continue
        st = by_step.get((f.rank, f.step)) if f.step is not None else None
        scope = "step" if st is not None else "rank"
        if st is not None:
            wait, exposed = st.exposed_wait_ns, st.exposed_comm_ns
        elif f.rank in totals:
            steps = totals[f.rank].steps
            known = [s.exposed_wait_ns for s in steps if s.exposed_wait_ns is not None]
            wait = sum(known) if known else None
            exposed = sum(s.exposed_comm_ns for s in steps)
        else:
            continue
        if wait is None or exposed <= 0 or 2 * wait < exposed:
            continue
        out[i] = replace(f, severity="info", evidence={
            **f.evidence, "peer_wait": {"wait_ns": int(wait), "exposed_ns": int(exposed), "rank": culprit,
                                        "of": scope}})
    return out
