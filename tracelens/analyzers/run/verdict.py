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

import statistics
from dataclasses import replace

from ...contract import Cause, Culprit, RankResult, Transport, Verdict
from ..thresholds import Thresholds, material
from ..verdicts import majority
from ..wording import headline, lever

_ORDER = ("peer-wait", "not-overlapped", "overlap-tax")
_TCP = ("tcp_silent_fallback", "tcp_no_rdma")


def verdict(ranks: list[RankResult], *, matched: bool, culprit: Culprit | None, transport: Transport | None,
            dimension: str | None, th: Thresholds) -> Verdict:
    """``matched``: collectives were matched across ranks (peer-wait is measured); ``dimension``: the
    parallelism dimension with the most exposed communication."""
    rows = [_per_step(r) for r in ranks]
    rows = [x for x in rows if x is not None]
    if not rows or not any(x["comm"] for x in rows):
        return Verdict(headline=headline(None, None, None), causes=[])
    step = statistics.median(x["step"] for x in rows)
    causes = []
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
        causes.append(Cause(cause=name, ns_per_step=ns, share_of_step=ns / step if step > 0 else None, ranks=where,
                            culprit=who, pattern=pattern,
                            # Advice for a cause material nowhere would be noise.
                            lever=lever(name, who, pattern, dimension, tcp and name == "not-overlapped", cpu)
                            if where or who is not None else ""))
    causes.sort(key=lambda c: (-c.ns_per_step, _ORDER.index(c.cause)))
    top = causes[0]
    waiting = [x["rank"] for x in rows if material(th, int(round(x["wait"])), int(round(x["step"])))]
    biggest = top if material(th, top.ns_per_step, int(round(step))) else None
    return Verdict(headline=headline(biggest, top, waiting, tcp=tcp), causes=causes)


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
