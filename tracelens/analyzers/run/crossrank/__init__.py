"""Across ranks: matched collectives, aligned clocks, wait versus transfer, the straggler and bus bandwidth.

It sees the ranks' collective tables (RankAnalysis.comm), never a trace: ``match`` keys and validates the
instances, ``clocks`` estimates each rank's (or host's) clock offset from their end times, ``waits`` splits
every instance into wait and transfer, ``straggler`` names the rank the others wait for, ``bandwidth``
gives algbw/busbw and ``slow_links`` names a communicator whose busbw is well below its peers'. Everything is
vectorised over the concatenated table (bench/bench_combine.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ...._speed import give_back_freed_memory
from ....contract import CrossRank, Matching, MatchedCollective, RankAcross, WarningEntry
from ...seam import LEAD_COLUMNS, RankAnalysis
from ...thresholds import Thresholds
from ...wording import Finding
from . import bandwidth, clocks, match, slow_instances, slow_links, straggler, waits


_GIVE_BACK_ROWS = 1 << 20        # rows of the table from which a stage's freed pages are given back (_give_back)
# Members' start and end times the Report keeps for instances of ranks known from logs alone (_with_times):
# 2^20 rows, about 100 MB of the Report's memory and 40 MB of its JSON.
MEMBER_TIMES_ROWS = 1 << 20


@dataclass
class Outcome:
    cross: CrossRank | None = None
    findings: list[Finding] = field(default_factory=list)
    warnings: list[WarningEntry] = field(default_factory=list)
    steps: dict = field(default_factory=dict)      # (rank position, step) -> {wait, transfer, exposed_wait}
    culprit: straggler.CulpritFound | None = None  # the rank the others wait for, and why
    outliers: list = field(default_factory=list)   # OutlierKind: the kinds of collective with outliers


@dataclass
class Matched:
    """The run's matched collectives, what every part of the cross-rank analysis reads, computed once: the
    ranks in report order and the thresholds; the concatenated table and its match; per matched row its
    rank's position and its aligned start and end; per instance its first row, op, size, group size, last
    rank's position, wait and bandwidths; the clocks and the wait/transfer split."""

    ordered: list[RankAnalysis]
    th: Thresholds
    tab: match.CollectiveRows
    m: match.Match
    ranks: np.ndarray
    pos: np.ndarray
    first: np.ndarray
    ops: list
    size: np.ndarray
    group: np.ndarray
    clk: clocks.Clocks
    w: waits.Waits
    last_pos: np.ndarray
    inst_wait: np.ndarray
    algbw: list
    busbw: list
    # Per instance: its members' latest step. A rank known from logs has no steps (-1): where an instance is
    # named by such a rank, its traced members give its step (marked steps are the program's, alike on every
    # rank).
    any_step: np.ndarray


def analyze(ordered: list[RankAnalysis], th: Thresholds) -> Outcome:
    """The cross-rank analysis of ranks in report order; nothing for fewer than two."""
    tab = match.concat(ordered)
    ranks = np.array([a.rank for a in ordered], dtype=np.int64)
    results = [a.result for a in ordered]
    if len(ordered) < 2:
        found, kinds = slow_instances.find(tab, ranks, results, th)
        return Outcome(findings=found, outliers=kinds)
    groups: dict[str, tuple[int, ...]] = {}
    for a in ordered:
        for name, members in a.groups.items():
            groups.setdefault(name, members)
    m = match.match(tab, ranks, groups)
    _give_back(tab)
    c, rows = tab.cols, m.rows
    pos = tab.pos[rows]
    n_inst = len(m.starts)
    cnt = np.diff(np.append(m.starts, len(rows)))
    inst = np.repeat(np.arange(n_inst), cnt)
    size = np.maximum.reduceat(c["bytes"][rows], m.starts) if n_inst else np.empty(0, np.int64)
    recorded = np.maximum.reduceat(c["group_size"][rows], m.starts) if n_inst else np.empty(0, np.int64)
    group = np.where(recorded > 0, recorded, cnt)
    hosts = [a.host for a in ordered]
    clk = clocks.estimate(pos, inst, c["end_ns"][rows], size >= th.bandwidth_min_bytes, hosts, th)
    start, end = c["start_ns"][rows], c["end_ns"][rows]
    w = waits.compute(start, end, pos, clk.offset, clk.applied, m.starts, inst)
    del inst                    # it is w.inst now: at thousands of ranks every row's array counts
    _give_back(tab)
    out = Outcome(warnings=list(m.warnings))
    windows = [_windows(a) for a in ordered]
    totals, out.steps = waits.per_rank(pos, start, end, w.transfer[w.inst] if n_inst else np.empty(0, np.int64),
                                       len(ordered), windows, [a.exposed for a in ordered])
    del start, end              # gathered again where needed: at thousands of ranks every row's array counts
    _give_back(tab)

    first = rows[m.starts] if n_inst else np.empty(0, np.int64)
    ops = [tab.names["op"][k] if k >= 0 else None for k in c["op"][first].tolist()]
    algbw, busbw = bandwidth.per_instance(ops, size, group, w.transfer)
    last_pos = np.where(w.last >= 0, pos[np.maximum(w.last, 0)], -1) if n_inst else np.empty(0, np.int64)
    inst_wait = np.add.reduceat(w.wait, m.starts) if n_inst else np.empty(0, np.int64)
    any_step = np.maximum.reduceat(match.take(c["step"], rows), m.starts) if n_inst else np.empty(0, np.int64)
    mt = Matched(ordered=ordered, th=th, tab=tab, m=m, ranks=ranks, pos=pos, first=first, ops=ops, size=size,
                 group=group, clk=clk, w=w, last_pos=last_pos, inst_wait=inst_wait, algbw=algbw, busbw=busbw,
                 any_step=any_step)
    out.cross = CrossRank(
        reference_rank=int(ranks[clk.reference]),
        ranks=_ranks(mt, totals),
        collectives=(collectives := _collectives(mt)),
        bandwidth=bandwidth.summary(ops, size, group, algbw, busbw, th.bandwidth_min_bytes),
        matching=Matching(key=m.key, matched=n_inst, unmatched=m.unmatched,
                          missing_ranks=_missing(ordered, ranks, groups)))
    _give_back(tab)
    made_up = any(a.exec_times for a in ordered)       # times made from exec times: no clock's
    untimed = sum(c.starts_ns is None for c in collectives)
    if untimed and not made_up:
        out.warnings.append(WarningEntry(code="member-times-left-out", rank=None, count=untimed, message=(
            f"members' start and end times kept for the first {MEMBER_TIMES_ROWS:,} members of the instances of "
            f"ranks known from NCCL Inspector logs alone, in order of start; left out of {untimed:,} instances "
            f"(their numbers are whole; the collective strip and export show the ones kept)")))
    if n_inst:
        late = straggler.late_rows(w.last, w.skew, w.wait, m.starts, w.trusted, th)
        late_row = np.maximum(late, 0)
        launch = c["launch_ns"][rows[late_row]]
        delay = np.where((late >= 0) & (launch >= 0), c["start_ns"][rows[late_row]] - launch, -1)
        wait_late = np.where(late >= 0, w.wait[late_row], 0)
        lead = {k: match.take(c[k], rows) for k in LEAD_COLUMNS}
        cpu = all(a.result.mode == "cpu" for a in ordered)
        first_start = [a.result.steps[0].start_ns - int(clk.offset[p]) if a.result.steps and clk.applied[p] else None
                       for p, a in enumerate(ordered)]
        late_step = c["step"][rows[late_row]]
        arrivals = straggler.Arrivals(pos=pos, wait=w.wait, lead=lead, starts=m.starts, members=cnt, rows_late=late,
                                      skew=w.skew, caused=inst_wait - wait_late,
                                      step=np.where(late_step >= 0, late_step, any_step),
                                      delay=delay, first_start=first_start,
                                      known=~np.array([a.from_logs for a in ordered], bool)[pos]
                                      if any(a.from_logs for a in ordered) else None)
        exposed = {k: v["exposed_wait_ns"] for k, v in out.steps.items()}
        out.culprit = straggler.find([a.result for a in ordered], arrivals, cpu, th, exposed)
        del arrivals, lead, delay, wait_late, late_step
        _give_back(tab)
        if out.culprit is not None:
            out.findings.append(out.culprit.finding)
    out.findings += _clock_findings(mt)
    out.findings += slow_links.find(mt)
    found, out.outliers = slow_instances.find(tab, ranks, results, th, mt)
    if made_up:
        # Their order is the instances' (communicator, coll_sn), but no start of theirs is a clock's.
        for k in out.outliers:
            k.start_ns = [None] * len(k.start_ns)
        for f in found:
            for x in [*f.evidence["listed"], f.evidence["worst"]]:
                x["start_ns"] = None
    out.findings += found
    return out


def _give_back(tab: match.CollectiveRows) -> None:
    """After a stage of a table of millions of rows: the pages of its freed temporaries back to the system.
    glibc raises its mmap threshold to the size of each large array freed, so the next stages' arrays of a
    few MB each come from its heap, which keeps their pages once freed: at 4,096 ranks that was hundreds of
    MB held for nothing (bench/RESULTS.md, "NCCL Inspector logs of thousands of ranks")."""
    if len(tab) >= _GIVE_BACK_ROWS:
        give_back_freed_memory()


def _windows(a: RankAnalysis) -> tuple[list, np.ndarray, np.ndarray]:
    """The rank's step windows: step numbers (-1 for a whole-trace window), starts and ends."""
    steps = a.result.steps
    return ([-1 if s.step is None else s.step for s in steps], np.array([s.start_ns for s in steps], np.int64),
            np.array([s.end_ns for s in steps], np.int64))


def _ranks(mt: Matched, totals: dict) -> list[RankAcross]:
    """Per rank: its clock, how many matched collectives it was in, its wait and transfer (``totals``), and
    how often it arrived last."""
    ordered, pos, clk, last_pos = mt.ordered, mt.pos, mt.clk, mt.last_pos
    n = len(ordered)
    matched = np.bincount(pos, minlength=n)
    late = np.bincount(last_pos[last_pos >= 0], minlength=n)
    # A rank whose times were made from exec times has no clock to speak of: its offset is unknown.
    return [RankAcross(rank=a.rank, host=a.host, clock_offset_ns=None if a.exec_times else clk.estimate[p],
                       clock_spread_ns=None if a.exec_times else clk.spread[p],
                       clock_corrected=bool(clk.applied[p]) and not a.exec_times, matched=int(matched[p]),
                       wait_ns=int(totals["wait_ns"][p]), transfer_ns=int(totals["transfer_ns"][p]),
                       exposed_wait_ns=int(totals["exposed_wait_ns"][p]), late_count=int(late[p]))
            for p, a in enumerate(ordered)]


def _collectives(mt: Matched) -> list[MatchedCollective]:
    """Every matched instance as the Report holds it, in order of its first start."""
    tab, m, first, ranks, pos, ops, size, group = mt.tab, mt.m, mt.first, mt.ranks, mt.pos, mt.ops, mt.size, mt.group
    w, last_pos, inst_wait, algbw, busbw = mt.w, mt.last_pos, mt.inst_wait, mt.algbw, mt.busbw
    c = tab.cols
    by_start = np.lexsort((np.arange(len(first)), w.start))
    bounds = np.append(m.starts, len(pos))
    keep = _with_times(mt, by_start, np.diff(bounds))
    rows = np.flatnonzero(np.repeat(keep, np.diff(bounds))) if not keep.all() else slice(None)
    offset = mt.clk.offset[pos[rows]]
    s_all = (c["start_ns"][m.rows[rows]] - offset).tolist()
    e_all = _shared(c["end_ns"][m.rows[rows]] - offset)
    del offset, rows
    # Where an instance's members' times are in s_all and e_all (those of the instances kept, in order).
    at = np.concatenate([[0], np.cumsum(np.where(keep, np.diff(bounds), 0))]).tolist()
    keep = keep.tolist()
    pgs = [tab.names["pg_name"][k] if k >= 0 else None for k in c["pg_name"][first].tolist()]
    steps = c["step"][first].tolist()
    bounds = bounds.tolist()
    at_rank = ranks[pos]
    # One list for the instances of the same members (a communicator's, in rank order): a world communicator
    # of thousands of ranks would otherwise repeat them in every one of its instances.
    lists: dict = {}

    def members(lo: int, hi: int) -> list:
        key = at_rank[lo:hi].tobytes()
        got = lists.get(key)
        if got is None:
            got = lists[key] = at_rank[lo:hi].tolist()
        return got

    out = []
    for i in by_start.tolist():
        out.append(MatchedCollective(
            pg=pgs[i], seq=int(m.order[i]), step=None if steps[i] < 0 else steps[i], op=ops[i],
            bytes=None if size[i] < 0 else int(size[i]), group_size=int(group[i]),
            ranks=members(bounds[i], bounds[i + 1]),
            last_rank=None if last_pos[i] < 0 else int(ranks[last_pos[i]]),
            arrival_skew_ns=None if w.skew[i] < 0 else int(w.skew[i]), transfer_ns=int(w.transfer[i]),
            wait_ns=int(inst_wait[i]), algbw_gbps=algbw[i], busbw_gbps=busbw[i],
            starts_ns=s_all[at[i]:at[i + 1]] if keep[i] else None, ends_ns=e_all[at[i]:at[i + 1]] if keep[i] else None))
    return out


def _with_times(mt: Matched, by_start: np.ndarray, members: np.ndarray) -> np.ndarray:
    """Per instance: whether the Report keeps its members' start and end times. Every instance with a traced
    member does (annotate, the timeline and the collective strip draw them); of the instances of ranks known
    from NCCL Inspector logs alone, the first in order of start, up to MEMBER_TIMES_ROWS members in all: at
    thousands of ranks the members' times of every instance would be most of a report's memory and its JSON
    (bench/RESULTS.md, "NCCL Inspector logs of thousands of ranks")."""
    keep = np.ones(len(members), dtype=bool)
    if len(members) and any(a.exec_times for a in mt.ordered):
        # Times made from exec times (logs without timestamps) are no clock's: none are kept.
        made = np.array([a.exec_times for a in mt.ordered], dtype=np.int8)[mt.pos]
        keep &= np.maximum.reduceat(made, mt.m.starts) == 0
    if int(members.sum()) <= MEMBER_TIMES_ROWS or not any(a.from_logs for a in mt.ordered):
        return keep
    traced = ~np.array([a.from_logs for a in mt.ordered], dtype=bool)[mt.pos]
    logs_only = np.maximum.reduceat(traced.astype(np.int8), mt.m.starts) == 0
    order = by_start[logs_only[by_start]]
    within = np.cumsum(members[order]) <= MEMBER_TIMES_ROWS
    keep[order[~within]] = False
    return keep


def _shared(values: np.ndarray) -> list:
    """``values.tolist()`` with one int object per distinct value: the members of an instance end together and
    a rank is in thousands of instances, so a Report of thousands of ranks would otherwise hold tens of bytes
    per matched row for copies of the same few ints (bench/RESULTS.md, "NCCL Inspector logs of thousands of
    ranks")."""
    if not len(values):
        return []
    distinct, at = np.unique(values, return_inverse=True)
    return np.array(distinct.tolist(), dtype=object)[at.reshape(-1)].tolist()


def _missing(ordered, ranks: np.ndarray, groups: dict) -> list[int]:
    present = set(ranks.tolist())
    world = max((a.result.world_size or 0 for a in ordered), default=0)
    wanted = set(range(world))
    for members in groups.values():
        wanted.update(members)
    return sorted(wanted - present)


def _clock_findings(mt: Matched) -> list[Finding]:
    """One ``clock-offset`` finding: the offsets applied, or those that could not be."""
    ordered, clk, pos, th = mt.ordered, mt.clk, mt.pos, mt.th
    has_rows = np.bincount(pos, minlength=len(ordered)) > 0
    units: dict = {}
    for p, a in enumerate(ordered):
        if p == clk.reference or (clk.unit[p] is not None and clk.unit[p] == clk.unit[clk.reference]) or \
                a.exec_times:
            continue
        key = clk.unit[p] if clk.unit[p] is not None else f"rank {a.rank}"
        u = units.setdefault(key, {"host": clk.unit[p], "ranks": [], "offset_ns": clk.estimate[p],
                                   "spread_ns": clk.spread[p], "corrected": bool(clk.applied[p]), "seen": False})
        u["ranks"].append(a.rank)
        u["seen"] |= bool(has_rows[p])
    rows = [{k: v for k, v in u.items() if k != "seen"} for u in units.values() if u["seen"]]
    unsure = [u for u in rows if not u["corrected"]]
    moved = [u for u in rows if u["corrected"] and abs(u["offset_ns"]) >= th.clock_min_offset_ns]
    if not unsure and not moved:
        return []
    ref = ordered[clk.reference]
    evidence = {"reference_rank": ref.rank, "reference_host": ref.host, "per_host": clk.unit[0] is not None,
                "units": rows, "corrected_units": moved, "uncertain_units": unsure, "corrected": len(moved),
                "uncertain": len(unsure), "max_spread_ns": th.clock_max_spread_ns}
    verdict, severity = ("uncertain", "warning") if unsure else ("corrected", "info")
    return [Finding(id="clock-offset", severity=severity, rank=ref.rank, step=None, verdict=verdict,
                    evidence=evidence)]
