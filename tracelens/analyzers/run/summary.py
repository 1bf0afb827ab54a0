"""The run summary: totals over every rank, the worst rank, and the majority of the ranks' patterns."""

from __future__ import annotations

from ...contract import RankResult, Summary, ratio
from ..rank.pattern import majority


def summarize(ranks: list[RankResult]) -> Summary:
    comm = sum(r.totals.comm_ns for r in ranks)
    overlap_ns = sum(r.totals.overlap_ns for r in ranks)
    exposed = sum(r.totals.exposed_comm_ns for r in ranks)
    duration = sum(r.totals.duration_ns for r in ranks)
    scored = [r for r in ranks if r.totals.exposed_comm_fraction is not None and r.totals.comm_ns > 0]
    worst = max(scored, key=lambda r: r.totals.exposed_comm_fraction).rank if scored else None
    step_ids = {s.step for r in ranks for s in r.steps}
    verdict, counts = majority([r.pattern for r in ranks])
    hidden = sum(r.totals.perfect_overlap_step_ns or 0 for r in ranks)
    gain = None if duration <= 0 or any(r.totals.perfect_overlap_step_ns is None for r in ranks) \
        else 1.0 - hidden / duration
    return Summary(ranks=len({r.rank for r in ranks}), steps=len(step_ids),
                   overlap_pct=ratio(overlap_ns, comm, 100.0), exposed_comm_fraction=ratio(exposed, duration),
                   worst_rank=worst, comm_ns=comm, exposed_comm_ns=exposed,
                   pattern=verdict, pattern_counts=counts, perfect_overlap_gain=gain)
