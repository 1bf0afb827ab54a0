"""The run summary: totals over every rank, the worst rank, and the majority of the ranks' patterns."""

from __future__ import annotations

from ...contract import DimensionRun, RankResult, Summary, WorkTime, ratio
from ..verdicts import majority


WORK_TOP = 100      # names the Report keeps of the run's work (contract Summary.work)


def summarize(ranks: list[RankResult], work: list[list] = ()) -> Summary:
    """The run's sums; ``work``: each rank's work by name (rank/work.by_name), merged into the run's."""
    comm = sum(r.totals.comm_ns for r in ranks)
    overlap_ns = sum(r.totals.overlap_ns for r in ranks)
    exposed = sum(r.totals.exposed_comm_ns for r in ranks)
    duration = sum(r.totals.duration_ns for r in ranks)
    # The most exposed rank: the most exposed communication time (the lowest rank on a tie).
    scored = [r for r in ranks if r.totals.comm_ns > 0]
    worst = min(scored, key=lambda r: (-r.totals.exposed_comm_ns, r.rank)).rank if scored else None
    step_ids = {s.step for r in ranks for s in r.steps}
    verdict, counts = majority([r.pattern for r in ranks])
    hidden = sum(r.totals.perfect_overlap_step_ns or 0 for r in ranks)
    gain = None if duration <= 0 or any(r.totals.perfect_overlap_step_ns is None for r in ranks) \
        else 1.0 - hidden / duration
    waits = [s.exposed_wait_ns for r in ranks for s in r.steps if s.exposed_wait_ns is not None]
    arrival = None if not waits or duration <= 0 else sum(waits) / duration
    return Summary(ranks=len({r.rank for r in ranks}), steps=len(step_ids),
                   overlap_pct=ratio(overlap_ns, comm, 100.0), exposed_comm_fraction=ratio(exposed, duration),
                   worst_rank=worst, comm_ns=comm, exposed_comm_ns=exposed,
                   pattern=verdict, pattern_counts=counts, perfect_overlap_gain=gain,
                   dimensions=_dimensions(ranks), overlap_tax_ns=sum(r.totals.overlap_tax_ns for r in ranks),
                   overlap_tax_compared=sum(r.totals.overlap_tax_compared for r in ranks),
                   effective_exposed_ns=sum(r.totals.effective_exposed_ns for r in ranks), arrival_gain=arrival,
                   overlap_tax_low_ns=sum(r.totals.overlap_tax_low_ns for r in ranks),
                   overlap_tax_high_ns=sum(r.totals.overlap_tax_high_ns for r in ranks), work=_work(work))


def _work(per_rank: list[list]) -> list[WorkTime]:
    """Each (name, kind): its mean per step over every rank (a rank without it among its top names counts 0),
    the most time first."""
    n = len(per_rank)
    if not n:
        return []
    merged: dict[tuple[str, str], list] = {}
    for rows in per_rank:
        for name, kind, count, ns in rows:
            m = merged.setdefault((name, kind), [0, 0.0, 0.0])
            m[0] += 1
            m[1] += count
            m[2] += ns
    ordered = sorted(merged.items(), key=lambda kv: (-kv[1][2], kv[0]))[:WORK_TOP]
    return [WorkTime(name=name, kind=kind, ranks=k, count_per_step=round(count / n, 3), ns_per_step=round(ns / n))
            for (name, kind), (k, count, ns) in ordered]


def _dimensions(ranks: list[RankResult]) -> list[DimensionRun]:
    """Each dimension's sums over the ranks, most exposed first."""
    by: dict[str, list] = {}
    for r in ranks:
        for d in r.dimensions:
            by.setdefault(d.dimension, []).append((r.rank, d))
    out = []
    for dim, rows in by.items():
        comm = sum(d.comm_ns for _, d in rows)
        exposed = sum(d.exposed_comm_ns for _, d in rows)
        worst_rank, worst = min(rows, key=lambda x: (-x[1].exposed_comm_ns, x[0]))
        rules = sorted({g.rule for _, d in rows for g in d.groups})
        out.append(DimensionRun(dimension=dim, ranks=len({rank for rank, _ in rows}), comm_ns=comm,
                                exposed_comm_ns=exposed, overlap_pct=ratio(comm - exposed, comm, 100.0),
                                worst_rank=worst_rank, worst_exposed_ns=worst.exposed_comm_ns, rules=rules))
    out.sort(key=lambda d: (-d.exposed_comm_ns, d.dimension))
    return out
