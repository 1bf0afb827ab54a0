"""Per-rank analyzers: one rank's full trace in, a :class:`~..seam.RankAnalysis` out.

``overlap`` (interval sets, step windows, step metrics, per-collective exposure), ``pattern`` (the overlap
pattern of each step), ``syncs`` (sync stalls), ``launch_order``, ``copies`` (copy-bound steps), ``tax`` (the
overlap tax), ``hidden_comm`` (communication no rule classifies), ``arrival`` (what the rank did before each
collective), ``dimensions`` (the parallelism each collective serves), ``wfbp`` (the DDP bucket model) and
``settings`` (configured versus observed). Each takes the rank's one :class:`~.context.RankContext`, built
once here (``context.build``), and returns its parts: findings, columns, rows; none opens a file or words a
sentence.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ...errors import printable
from ...model import RankTrace
from ...contract import Collective, InputFile, PreCapture, RankResult, StepMetrics, Totals, WarningEntry, ratio
from ..seam import Context, RankAnalysis
from ..wording import Finding
from .. import intervals as iv, whatif
from . import (arrival, copies, dimensions, hidden_comm, launch_order, overlap, pattern, settings, syncs, tax, wfbp,
               work)
from .context import RankContext, build


def analyze_rank(trace: RankTrace, context: Context | None = None) -> RankAnalysis:
    """Every per-rank metric and finding of one rank; the trace is not kept."""
    t = trace
    notes: list[tuple[str, str, int]] = []

    def warn(code: str, message: str, count: int = 1) -> None:
        if count > 0:
            notes.append((code, message, int(count)))

    context = context or Context()
    ctx = build(t, context.thresholds, warn, context.steps_from, context.step_pattern)
    t = ctx.trace               # with the steps settled (marked, inferred or none)
    sets, windows, steps = ctx.sets, ctx.windows, ctx.steps
    taxed = tax.measure(ctx)
    for st, paid, low, high, k, u, v in zip(steps, *(x.tolist() for x in (
            taxed.tax_ns, taxed.low_ns, taxed.high_ns, taxed.compared, taxed.uncompared, taxed.varying))):
        st.overlap_tax_ns, st.effective_exposed_ns = paid, st.exposed_comm_ns + paid
        st.overlap_tax_low_ns, st.overlap_tax_high_ns = low, high
        st.overlap_tax_compared, st.overlap_tax_uncompared, st.overlap_tax_varying = k, u, v
    blind = _nccl_without_device(t) if sets.mode == "cpu" else None
    findings: list[Finding] = [] if blind is None else [blind]
    patterns, found = pattern.analyze(ctx, blind=blind is not None)
    for st, (verdict, evidence) in zip(steps, patterns):
        st.pattern, st.pattern_evidence = verdict, evidence
    findings += found
    if sets.mode == "gpu":
        findings += syncs.analyze(ctx)
        findings += launch_order.analyze(ctx)
        findings += copies.analyze(ctx)
        findings += tax.finding(ctx, taxed)
        findings += hidden_comm.analyze(ctx)
    pre = overlap.pre_capture(t, sets)
    verdict, counts = pattern.majority([s.pattern for s in steps])
    exp, comm = ctx.exposure, ctx.comm
    comm.update(arrival.leads(ctx))
    costs = _costs(ctx)
    findings += costs.findings
    result = RankResult(
        rank=t.meta.rank, world_size=t.meta.world_size, device=sets.device,
        device_name=ctx.device_name, mode=sets.mode, source=printable(t.meta.source, one_line=True),
        steps=steps, totals=_totals(steps), pattern=verdict, pattern_counts=counts,
        pre_capture=None if pre is None else PreCapture(**pre), dimensions=costs.per_dim,
        bucket_model=costs.bucket_model, settings=costs.settings, steps_from=ctx.steps_from)
    collectives = [
        Collective(rank=t.meta.rank, step=None if step < 0 else step, name=str(name),
                   op=op if isinstance(op, str) else None, bytes=None if size < 0 else size,
                   start_ns=start, duration_ns=dur, exposed_ns=exposed,
                   pg=pg if isinstance(pg, str) else None, seq=None if seq < 0 else seq,
                   group_size=None if gsize <= 0 else gsize, dtype=dtype if isinstance(dtype, str) else None)
        for step, name, op, size, start, dur, exposed, pg, seq, gsize, dtype in zip(
            *(exp[c].tolist() for c in ("step", "name", "op", "bytes", "start_ns", "duration_ns", "exposed_ns")),
            *(comm[c].tolist() for c in ("pg_name", "seq", "group_size", "dtype")))]
    # A file name that is not UTF-8 is written escaped wherever the report shows it (errors.printable).
    inputs = [InputFile(path=printable(t.meta.source, one_line=True), format=t.meta.format, rank=t.meta.rank,
                        bytes=t.meta.bytes, rank_rule=t.meta.rank_rule)]
    inputs += [InputFile(path=printable(f["path"], one_line=True), format=f["format"], rank=t.meta.rank,
                         bytes=f["bytes"], rank_rule="manifest") for f in t.meta.side_files]
    warnings = [WarningEntry(code=w.code, rank=t.meta.rank, count=w.count, message=printable(w.message, one_line=True))
                for w in t.meta.warnings]
    warnings += [WarningEntry(code=c, rank=t.meta.rank, count=n, message=printable(m, one_line=True))
                 for c, m, n in notes]
    warnings += [WarningEntry(code=w.code, rank=None, count=w.count, message=printable(w.message, one_line=True))
                 for w in t.meta.input_warnings]
    return RankAnalysis(rank=t.meta.rank, source=printable(t.meta.source, one_line=True), inputs=inputs, result=result,
                        collectives=collectives, comm=comm, findings=findings, warnings=warnings,
                        host=t.meta.host, cpus=t.meta.cpus, groups=ctx.groups, exposed=_exposed_set(sets, windows),
                        work=work.by_name(ctx))


def _exposed_set(sets, windows) -> tuple:
    """The rank's exposed communication inside its step windows (communication no compute covered)."""
    inside = iv.intersect(iv.subtract(sets.comm, sets.compute), iv.union(windows.start, windows.end))
    return tuple(np.ascontiguousarray(a, dtype=np.int64) for a in inside)


class Costs(NamedTuple):
    """What the exposed communication costs and what would fix it: the exposure per parallelism dimension,
    the DDP bucket model, the settings beside the trace, and their findings."""

    per_dim: list
    bucket_model: object
    settings: list
    findings: list[Finding]


def _costs(ctx: RankContext) -> Costs:
    """The rank's :class:`Costs`; completes each step's row with its exposure per dimension and its time with
    perfect overlap."""
    measured, rules, comm_dims = dimensions.analyze(ctx)
    for w, st in enumerate(ctx.steps):
        st.by_dimension = dimensions.step_rows(measured, w)
        st.perfect_overlap_step_ns = whatif.perfect_overlap_ns(st)
    per_dim = dimensions.totals(measured, rules)
    found = dimensions.findings(ctx, per_dim, dimensions.pipeline(ctx, comm_dims, per_dim))
    bucket_model = wfbp.model(ctx, comm_dims)
    bucket = wfbp.finding(ctx, bucket_model)
    if bucket is not None:
        found.append(bucket)
    checks = settings.check(ctx, [d.dimension for d in per_dim], bucket_model, comm_dims)
    return Costs(per_dim, bucket_model, checks, found + settings.findings(ctx, checks))


def _totals(steps: list[StepMetrics]) -> Totals:
    """Sums over steps, ratios recomputed from the sums (not averaged)."""
    keys = ("duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns", "copy_ns",
            "memcpy_ns", "memset_ns", "overlap_tax_ns", "effective_exposed_ns", "overlap_tax_compared",
            "overlap_tax_uncompared", "overlap_tax_low_ns", "overlap_tax_high_ns", "overlap_tax_varying")
    sums = {k: sum(getattr(s, k) for s in steps) for k in keys}
    return Totals(**sums, overlap_pct=ratio(sums["overlap_ns"], sums["comm_ns"], 100.0),
                  exposed_comm_fraction=ratio(sums["exposed_comm_ns"], sums["duration_ns"]),
                  perfect_overlap_step_ns=sum(s.perfect_overlap_step_ns for s in steps))


def _nccl_without_device(t: RankTrace) -> Finding | None:
    """A CPU-only trace of a run that used NCCL: say that the GPU was not recorded (once per rank)."""
    calls = overlap.nccl_host_calls(t)
    if not calls and t.meta.backend != "nccl":
        return None
    return Finding(
        id="no-gpu-activity", severity="warning", rank=t.meta.rank, step=None, verdict=None,
        evidence={"nccl_calls": calls, "gpus_listed": len(t.meta.device_names), "backend": t.meta.backend})
