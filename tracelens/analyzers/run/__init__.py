"""Run-level analyzers: every rank's :class:`~..seam.RankAnalysis` in, the Report out.

They never see a trace. ``combine`` puts the ranks' shares together (in rank order, whatever order they
came in), runs the analyses across ranks (``summary``: the run's totals and pattern majority; ``slow_ranks``:
stragglers by step and compute times, where no collective was matched; ``crossrank``: matched collectives,
clocks, wait versus transfer, the rank the others wait for, bandwidth) and words every finding once
(analyzers/wording/).
"""

from __future__ import annotations

from typing import Iterable

import msgspec

from ...contract import Culprit, InputFile, InspectorPair, InspectorRanks, Report, Verdict, WarningEntry
from ...errors import printable
from ...model.nccl_records import NcclInputs
from .. import whatif
from ..seam import Context, RankAnalysis
from ..wording import diagnosis, logs_headline
from . import crossrank, log_pairing, log_ranks, slow_ranks, summary, transport, transport_bw, trends, verdict

# Findings of one rank and step are listed in this order.
_ORDER = {"nccl-transport": -1, "no-gpu-activity": 0, "clock-offset": 1, "straggler": 1, "slow-link": 1,
          "overlap-pattern": 2, "sync-stall": 3, "launch-order": 4, "memcpy-bound": 5,
          "parallelism": 6, "bucket-size": 7, "config-mismatch": 8}


def combine(analyses: Iterable[RankAnalysis], context: Context | None = None, *,
            nccl: NcclInputs | None = None) -> Report:
    """The Report of a run from its ranks' analyses (any order; each rank's analysis once); ``nccl``: the
    run's NCCL logs and recorded NCCL settings, for the network transport verdict, and its NCCL Inspector
    logs, whose ranks are the run's when no trace is given (analyzers/run/log_ranks.py)."""
    th = (context or Context()).thresholds
    nccl = nccl or NcclInputs()
    given = list(analyses)
    logs, joined, beside = None, None, []
    if nccl.inspector and given:
        # The traced ranks teach which communicator serves which process group, and from which coll_sn its Seq
        # counts; the ranks without a trace join the cross-rank analysis with their logs' collectives so keyed.
        logs = log_ranks.analyses(nccl.inspector)
        joined = log_pairing.join(given, logs.analyses, th)
        if joined.pairs:
            given = given + joined.analyses
            beside += logs.warnings + joined.warnings
        else:
            beside += joined.warnings         # why not; what the unused logs held says nothing more
            logs = joined = None
            beside.append(WarningEntry(code="inspector-beside-traces", rank=None, count=len(nccl.inspector),
                                       message=(
                "NCCL Inspector logs given beside traces are not used: their collectives could not be paired "
                "with the traces' (report on the logs alone for what they say across ranks)")))
    elif nccl.inspector:
        logs = log_ranks.analyses(nccl.inspector, exec_times=True)
        given = logs.analyses
        beside += logs.warnings
    ordered = sorted(given, key=RankAnalysis.sort_key)
    across = crossrank.analyze(ordered, th)
    # Ranks from logs have no steps to put in ``ranks``: what needs compute stays unknown.
    ranks = [_with_waits(p, a.result, across.steps) for p, a in enumerate(ordered) if not a.from_logs]
    traced = [a for a in ordered if not a.from_logs]
    if across.cross is not None:
        for a, r in zip(ordered, across.cross.ranks):
            if a.from_logs:
                r.exposed_wait_ns = None
    if across.culprit is not None and ordered[across.culprit.pos].from_logs:
        across.culprit.finding.evidence["from_logs"] = True     # its reason's evidence is not in the logs
    findings = [f for a in ordered for f in a.findings]
    # Step times name a straggler only where no collective was matched: with matched collectives the rank the
    # others wait for is found from its arrivals, and the waiting ranks are the ones with the longest steps.
    if across.cross is None or not across.cross.matching.matched:
        findings += slow_ranks.find(ranks, th)
    findings += across.findings
    findings += trends.find(ranks, th, None if across.culprit is None else ordered[across.culprit.pos].rank)
    if not traced and across.cross is not None:
        # No steps (ranks known from logs alone): the drift of a kind of collective over its instances.
        findings += trends.find_in_collectives(across.cross.collectives, th)
    # Bandwidth over transfer times of collectives matched across ranks when there are some, else from each
    # rank's own durations.
    rows, source = _cross_rank_rows(across.cross, th.transport_min_bytes), "cross-rank"
    if not rows:
        rows, source = transport_bw.rows_from_comm(ordered, th.transport_min_bytes), "comm-table"
    net, found = transport.analyze(nccl.logs, nccl.env, rows, th, source=source)
    if found is not None:
        findings.append(found)
    findings.sort(key=lambda f: (f.rank, -1 if f.step is None else f.step, _ORDER.get(f.id, 9)))
    inputs = [i for a in traced for i in a.inputs] + (logs.inputs if logs is not None else [])
    listed = {i.path for i in inputs}
    inputs += [InputFile(path=printable(log.path, one_line=True), format="nccl-log", rank=-1, bytes=log.bytes,
                         rank_rule="none") for log in nccl.logs if printable(log.path, one_line=True) not in listed]
    warnings = [w for a in ordered for w in a.warnings] + across.warnings + beside
    warnings += [WarningEntry(code=code, rank=None, count=n, message=printable(message, one_line=True))
                 for code, n, message in nccl.notes]
    total = summary.summarize(ranks, [a.work for a in traced])
    matched = across.cross is not None and across.cross.matching.matched > 0
    culprit = None if across.culprit is None else \
        Culprit(rank=ordered[across.culprit.pos].rank, reason=across.culprit.reason)
    if matched:
        findings = verdict.point_at_culprit(findings, ranks, None if culprit is None else culprit.rank, th)
    if logs is None or traced:
        answer = verdict.verdict(ranks, matched=matched, culprit=culprit, transport=net,
                                 dimension=total.dimensions[0].dimension if total.dimensions else None, th=th,
                                 culprit_saving=None if across.culprit is None else across.culprit.saving_by_step,
                                 logs_alone=diagnosis(found).title if found is not None and not ordered else None,
                                 untraced=tuple(a.rank for a in ordered if a.from_logs), crowded=_crowded(ordered))
    else:
        answer = Verdict(headline=logs_headline(*_from_logs(across, th)), causes=[])
    return Report(inputs=inputs, ranks=ranks, summary=total,
                  collectives=[c for a in ordered for c in a.collectives], warnings=warnings,
                  diagnoses=[diagnosis(f) for f in findings], transport=net, cross_rank=across.cross,
                  verdict=answer, outliers=across.outliers,
                  inspector=None if logs is None else InspectorRanks(
                      ranks=sorted(a.rank for a in ordered if a.from_logs), files=len(nccl.inspector),
                      records=logs.records, timed=logs.rows, exec_times=logs.exec_times, traced=[a.rank for a in traced],
                      paired=[] if joined is None else [InspectorPair(pg=p.pg, comm=p.comm, sn_offset=p.offset,
                                                                      agreed=p.agreed, of=p.of)
                                                        for p in joined.pairs]))


def _crowded(ordered: list[RankAnalysis]) -> tuple[int, int] | None:
    """(ranks, cores) of the host whose ranks most outnumber the cores they could run on, where the inputs say
    both (a collect run's manifest records each process's cores); None where none does or nothing says."""
    hosts: dict = {}
    for a in ordered:
        if a.cpus and a.host is not None and not a.from_logs:
            n, cores = hosts.get(a.host, (0, a.cpus))
            hosts[a.host] = (n + 1, min(cores, a.cpus))
    over = [(n, cores) for n, cores in hosts.values() if n > cores]
    return max(over, key=lambda x: x[0] / x[1]) if over else None


def _from_logs(across, th) -> tuple:
    """What a logs-only verdict states: the culprit's rank and the waiting it caused (its finding's evidence),
    the slowest transfers: the bandwidth-bound bucket with the lowest median busbw, by the sizes seen in it, and
    the slow link that lost the most time (its finding's evidence; None: none)."""
    found = across.culprit
    rank = None if found is None else found.finding.rank
    caused = 0 if found is None else found.finding.evidence["caused_wait_ns"]
    rows = [b for b in (across.cross.bandwidth if across.cross else []) if not b.latency_bound and
            b.busbw_p50_gbps is not None]
    slow = min(rows, key=lambda b: (b.busbw_p50_gbps, b.min_bytes), default=None)
    links = [f.evidence for f in across.findings if f.id == "slow-link"]
    link = max(links, key=lambda e: e["lost_ns"], default=None)
    return rank, caused, None if slow is None else (slow.op, slow.smallest_bytes, slow.largest_bytes,
                                                    slow.busbw_p50_gbps), link, \
        across.cross.matching.matched if across.cross else 0


def _cross_rank_rows(cross, min_bytes: int) -> list:
    """Transport bandwidth rows from the matched collectives (their busbw over the transfer time)."""
    if cross is None:
        return []
    return [transport_bw.Row(c.op, c.bytes, c.group_size, c.busbw_gbps, None) for c in cross.collectives
            if c.busbw_gbps is not None and c.bytes is not None and c.bytes >= min_bytes and c.group_size >= 2]


def _with_waits(pos: int, result, sums: dict):
    """The rank's result with each step's cross-rank sums (a copy: analyses are never changed). The exposed
    wait for other ranks is not overlap's to hide: it stays in the step's perfect-overlap time."""
    if not sums:
        return result
    steps = []
    for s in result.steps:
        got = sums.get((pos, -1 if s.step is None else s.step))
        if got is not None:
            s = msgspec.structs.replace(s, **{k: int(v) for k, v in got.items()})
            if s.perfect_overlap_step_ns is not None:
                s.perfect_overlap_step_ns = whatif.perfect_overlap_ns(s)
        steps.append(s)
    totals = result.totals
    if totals.perfect_overlap_step_ns is not None:
        totals = msgspec.structs.replace(totals, perfect_overlap_step_ns=sum(s.perfect_overlap_step_ns or 0
                                                                             for s in steps))
    return msgspec.structs.replace(result, steps=steps, totals=totals)
