"""The seam between one rank and the whole run.

``analyze_rank`` sees one rank's full trace and returns a :class:`RankAnalysis`: small, picklable, and
holding everything the run needs from that rank (its step metrics, findings, warnings and the per-instance
collective table that cross-rank analyses match on). ``combine`` sees only RankAnalyses, never a trace.
So a rank can be analysed and dropped before the next is loaded, and ranks can be analysed in worker
processes or on a cluster: whatever runs them, the same analyses give the same Report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..contract import Collective, InputFile, RankResult, WarningEntry
from .thresholds import Thresholds

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np      # the Context is made before the decode workers start: nothing heavy here

    from .wording import Finding   # a warm report reads no finding's sentences: the wording stays unloaded


@dataclass(frozen=True)
class Context:
    """What every rank's analysis and the combine share: the thresholds of every rule, and where the steps
    come from (``steps_from``, as :class:`~tracelens.options.ReportOptions` has it; ``step_pattern``: the
    regex that named the step ranges, when one did)."""

    thresholds: Thresholds = field(default_factory=Thresholds)
    steps_from: str = "auto"
    step_pattern: str | None = None


# Columns of the per-instance collective table, in order: what matching collectives across ranks needs.
# ``stream``: the device stream (-1 for CPU-only gloo collectives); ``launch_ns``: the end of the host call
# that launched it, -1 when unknown. ``lead_*``: what the rank did since its previous collective of the same
# group, until this one started (analyzers/rank/arrival.py): the culprit's reason is read from them.
LEAD_COLUMNS = ("lead_ns", "lead_compute_ns", "lead_sync_ns", "lead_launch_ns", "lead_host_ns")
COMM_COLUMNS = ("step", "op", "dtype", "bytes", "group_size", "pg_name", "pg_desc", "seq", "start_ns", "end_ns",
                "exposed_ns", "stream", "launch_ns") + LEAD_COLUMNS


@dataclass
class RankAnalysis:
    """One rank's share of the Report, and its collective instances for run-level analyses.

    ``comm`` maps COMM_COLUMNS to arrays, one row per communication activity of the rank's analysed device
    (int64 with -1 for unknown; object arrays of str/None for op, dtype and the process group); ``findings``
    are still structured (the wording is applied once, in combine). ``host`` is the machine the rank ran on
    (None when the trace does not say); ``groups`` maps a process group's name to its member ranks, where the
    trace lists them. ``exposed`` is the set of the rank's exposed communication inside its step windows
    (communication no compute covered, as intervals on its own clock): combine splits it into the wait for
    other ranks and the rest."""

    rank: int
    source: str
    inputs: list[InputFile]
    result: RankResult
    collectives: list[Collective]
    comm: dict[str, np.ndarray]
    findings: list[Finding]
    warnings: list[WarningEntry]
    host: str | None = None
    groups: dict[str, tuple[int, ...]] = field(default_factory=dict)
    exposed: tuple = ()
    work: list = field(default_factory=list)     # (name, kind, count, ns) per step: rank/work.by_name
    # A rank known from NCCL Inspector logs (analyzers/run/log_ranks.py): its collectives, but no steps, no
    # compute and no leads (its lead columns are 0 for unknown, not for no time).
    from_logs: bool = False
    # ... whose logs had no kernel timestamps: its rows' times were made from exec times (log_ranks._exec_times),
    # so that waits and the last rank are right but no time of its is a clock's.
    exec_times: bool = False
    cpus: int | None = None                      # the cores its process could run on, where a manifest says

    def sort_key(self) -> tuple:
        """Order of ranks in the Report: by rank, then file; processes of one file claiming the same rank by
        when their first step started."""
        first = self.result.steps[0].start_ns if self.result.steps else 0
        return self.rank, self.source, first, self.result.device if self.result.device is not None else -1

    def renumber(self, rank: int, rule: str, code: str, message: str, at: int) -> None:
        """Give an analysis made under a stand-in rank its settled number (``rule``: how it was found), and
        the note saying so as the ``at``-th warning: what the analysis of the numbered trace would hold."""
        old = self.rank
        self.rank = self.result.rank = rank
        for item in (*self.inputs, *self.collectives, *self.findings):
            item.rank = rank
        if self.inputs:
            self.inputs[0].rank_rule = rule
        for w in self.warnings:
            if w.rank == old:
                w.rank = rank
        same = next((w for w in self.warnings[:at] if w.code == code), None)
        if same is not None:        # the trace's warning log counts a code once
            same.count += 1
        else:
            self.warnings.insert(at, WarningEntry(code=code, rank=rank, count=1, message=message))
