"""Run-level analyzers: every rank's :class:`~..seam.RankAnalysis` in, the Report out.

They never see a trace. ``combine`` puts the ranks' shares together (in rank order, whatever order they
came in), runs the analyses across ranks (``summary``: the run's totals and pattern majority; ``straggler``)
and words every finding once (analyzers/wording.py).
"""

from __future__ import annotations

from typing import Iterable

from ...contract import InputFile, Report, WarningEntry
from ...nccl_records import NcclInputs
from ..seam import Context, RankAnalysis
from ..wording import diagnosis
from . import straggler, summary, transport, transport_bw

# Findings of one rank and step are listed in this order.
_ORDER = {"nccl-transport": -1, "no-gpu-activity": 0, "straggler": 1, "overlap-pattern": 2, "sync-stall": 3, "launch-order": 4,
          "memcpy-bound": 5}


def combine(analyses: Iterable[RankAnalysis], context: Context | None = None, *,
            nccl: NcclInputs | None = None) -> Report:
    """The Report of a run from its ranks' analyses (any order; each rank's analysis once); ``nccl``: the
    run's NCCL logs and recorded NCCL settings, for the network transport verdict."""
    th = (context or Context()).thresholds
    ordered = sorted(analyses, key=RankAnalysis.sort_key)
    ranks = [a.result for a in ordered]
    findings = [f for a in ordered for f in a.findings]
    findings += straggler.find(ranks, th)
    nccl = nccl or NcclInputs()
    # Bandwidth rows from each rank's own durations; the cross-rank analysis's transfer-time rows replace
    # them once it exists (transport.analyze(..., source="cross-rank")).
    rows = transport_bw.rows_from_comm(ordered, th.transport_min_bytes)
    net, found = transport.analyze(nccl.logs, nccl.env, rows, th)
    if found is not None:
        findings.append(found)
    findings.sort(key=lambda f: (f.rank, -1 if f.step is None else f.step, _ORDER.get(f.id, 9)))
    inputs = [i for a in ordered for i in a.inputs]
    listed = {i.path for i in inputs}
    inputs += [InputFile(path=log.path, format="nccl-log", rank=-1, bytes=log.bytes, rank_rule="none")
               for log in nccl.logs if log.path not in listed]
    warnings = [w for a in ordered for w in a.warnings]
    warnings += [WarningEntry(code=code, rank=None, count=n, message=message) for code, n, message in nccl.notes]
    return Report(inputs=inputs, ranks=ranks, summary=summary.summarize(ranks),
                  collectives=[c for a in ordered for c in a.collectives], warnings=warnings,
                  diagnoses=[diagnosis(f) for f in findings], transport=net)
