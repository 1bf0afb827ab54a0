"""Per-rank analyzers: one rank's full trace in, a :class:`~..seam.RankAnalysis` out.

``overlap`` (interval sets, step windows, step metrics, per-collective exposure), ``pattern`` (the overlap
pattern of each step), ``syncs`` (sync stalls), ``launch_order``, ``copies`` (copy-bound steps), ``tax`` (the
overlap tax), ``hidden_comm`` (communication no rule classifies), ``dimensions`` (the parallelism each
collective serves), ``wfbp`` (the DDP bucket model) and ``settings`` (configured
versus observed). They share
a :class:`~.context.RankContext` and return structured findings; none opens a file or words a sentence.
"""

from __future__ import annotations

import re

import numpy as np

from ...errors import printable
from ...model import RankTrace
from ...contract import Collective, InputFile, PreCapture, RankResult, StepMetrics, Totals, WarningEntry, ratio
from ..seam import COMM_COLUMNS, Context, RankAnalysis
from ..wording import Finding
from .. import intervals as iv, whatif
from . import arrival, copies, dimensions, hidden_comm, launch_order, overlap, pattern, settings, syncs, tax, wfbp
from .context import RankContext, program


def analyze_rank(trace: RankTrace, context: Context | None = None) -> RankAnalysis:
    """Every per-rank metric and finding of one rank; the trace is not kept."""
    th = (context or Context()).thresholds
    t = trace
    notes: list[tuple[str, str, int]] = []

    def warn(code: str, message: str, count: int = 1) -> None:
        if count > 0:
            notes.append((code, message, int(count)))

    findings: list[Finding] = []
    sets = overlap.interval_sets(t, warn)
    windows = overlap.step_windows(t, sets, warn)
    steps = _steps(overlap.step_metrics(sets, windows))
    taxed = tax.measure(t, sets, windows, th)
    for st, paid, low, high, k, u, v in zip(steps, *(x.tolist() for x in (
            taxed.tax_ns, taxed.low_ns, taxed.high_ns, taxed.compared, taxed.uncompared, taxed.varying))):
        st.overlap_tax_ns, st.effective_exposed_ns = paid, st.exposed_comm_ns + paid
        st.overlap_tax_low_ns, st.overlap_tax_high_ns = low, high
        st.overlap_tax_compared, st.overlap_tax_uncompared, st.overlap_tax_varying = k, u, v
    exp = overlap.collective_exposure(t, sets)
    ctx = RankContext(trace=t, thresholds=th, sets=sets, windows=windows, steps=steps, exposure=exp)
    shapes = pattern.step_patterns(t, sets, windows, [s.overlap_pct for s in steps], exp, th)
    blind = sets.mode == "cpu" and _nccl_without_device(t, findings)
    kind = program(t)
    for st, (verdict, evidence) in zip(steps, shapes):
        if blind and st.comm_ns == 0:
            verdict = None      # NCCL ran, but on a GPU the profiler did not record: not "no-comm"
        st.pattern, st.pattern_evidence = verdict, evidence
        found = pattern.diagnose(t.meta.rank, st.step, verdict, evidence, st, sets.mode, th, kind)
        if found is not None:
            findings.append(found)
    if sets.mode == "gpu":
        findings += syncs.analyze(ctx)
        findings += launch_order.analyze(ctx)
        findings += copies.analyze(ctx)
        findings += tax.finding(ctx, taxed)
        findings += hidden_comm.analyze(ctx)
    pre = overlap.pre_capture(t, sets)
    verdict, counts = pattern.majority([s.pattern for s in steps])
    comm = _comm_table(t, exp)
    comm.update(arrival.leads(t, sets, windows, comm))
    groups = _groups(t.meta.pg_config)
    device_name = _device_name(t, sets.device)
    per_dim, bucket_model, checks = _costs(t, sets, windows, steps, exp, comm, groups, device_name, th, findings)
    result = RankResult(
        rank=t.meta.rank, world_size=t.meta.world_size, device=sets.device,
        device_name=device_name, mode=sets.mode, source=printable(t.meta.source, one_line=True),
        steps=steps, totals=_totals(steps), pattern=verdict, pattern_counts=counts,
        pre_capture=None if pre is None else PreCapture(**pre), dimensions=per_dim,
        bucket_model=bucket_model, settings=checks)
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
                        host=t.meta.host, groups=groups, exposed=_exposed_set(sets, windows))


def _exposed_set(sets, windows) -> tuple:
    """The rank's exposed communication inside its step windows (communication no compute covered)."""
    inside = iv.intersect(iv.subtract(sets.comm, sets.compute), iv.union(windows.start, windows.end))
    return tuple(np.ascontiguousarray(a, dtype=np.int64) for a in inside)


def _costs(t: RankTrace, sets, windows, steps, exp, comm, groups, device_name, th, findings: list):
    """What the exposed communication costs and what would fix it: exposure per parallelism dimension, each
    step's time with perfect overlap, the DDP bucket model and the settings beside the trace (their findings
    appended to ``findings``)."""
    measured, rules, comm_dims = dimensions.analyze(t, sets, windows, exp, comm, groups)
    for w, st in enumerate(steps):
        st.by_dimension = dimensions.step_rows(measured, w)
        st.perfect_overlap_step_ns = whatif.perfect_overlap_ns(st)
    per_dim = dimensions.totals(measured, rules)
    pipe = dimensions.pipeline(t.meta.rank, comm, comm_dims, groups, per_dim)
    findings += dimensions.findings(t.meta.rank, steps, per_dim, t.meta.env, th, pipe)
    bucket_model = wfbp.model(comm, comm_dims, sets.compute, steps)
    bucket = wfbp.finding(t.meta.rank, bucket_model, steps, th)
    if bucket is not None:
        findings.append(bucket)
    checks = settings.check(t.meta, device_name, [d.dimension for d in per_dim], bucket_model, comm, comm_dims,
                            list(dict.fromkeys(exp["name"].tolist())))
    findings += settings.findings(t.meta.rank, checks)
    return per_dim, bucket_model, checks


def _groups(pg_config: list[dict]) -> dict[str, tuple[int, ...]]:
    """Member ranks per process group name, from ``distributedInfo.pg_config``. A list shorter than the group
    (truncated by the profiler) or unreadable leaves that group's members unknown rather than guessed."""
    out = {}
    for pg in pg_config:
        name, ranks = pg.get("pg_name"), pg.get("ranks")
        if isinstance(ranks, str):           # kineto on-demand writes "[0, 1, ...]"
            ranks = [int(x) for x in re.findall(r"-?\d+", ranks)]
        if name is None or not isinstance(ranks, list) or not all(type(r) is int for r in ranks):
            continue
        size = pg.get("pg_size")
        if type(size) is int and size != len(ranks):
            continue
        out[str(name)] = tuple(sorted(set(ranks)))
    return out


def _comm_table(t: RankTrace, exp) -> dict[str, np.ndarray]:
    """The per-instance collective table (seam.COMM_COLUMNS) of the collectives the exposure table holds."""
    rows = exp["coll_idx"]
    coll = t.collectives
    start = exp["start_ns"]
    out = {"step": exp["step"], "start_ns": start, "end_ns": start + exp["duration_ns"],
           "exposed_ns": exp["exposed_ns"]}
    dev = exp["device_idx"]
    host_end = t.host_ops["end_ns"]
    if len(dev) and (dev >= 0).all():
        launch = t.device_ops["launch_idx"][dev]
        out["stream"] = t.device_ops["stream"][dev].astype(np.int64)
        out["launch_ns"] = np.where(launch >= 0, host_end[np.maximum(launch, 0)] if len(host_end) else -1, -1)
    else:
        # CPU-only gloo collectives run on whichever worker thread is free: one order per rank, no launch.
        out["stream"] = np.full(len(rows), -1, dtype=np.int64)
        out["launch_ns"] = np.full(len(rows), -1, dtype=np.int64)
    for c in ("op", "dtype", "bytes", "group_size", "pg_name", "pg_desc", "seq"):
        out[c] = coll[c][rows]
    return {c: np.ascontiguousarray(out[c]) for c in COMM_COLUMNS if c in out}


def _steps(frame) -> list[StepMetrics]:
    cols = ("step", "start_ns", "end_ns", "duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns",
            "idle_ns", "copy_ns", "memcpy_ns", "memset_ns", "complete")
    return [StepMetrics(
        step=None if step < 0 else step, start_ns=start, end_ns=end, duration_ns=duration, compute_ns=compute,
        comm_ns=comm, overlap_ns=overlap, exposed_comm_ns=exposed, idle_ns=idle, copy_ns=copy,
        memcpy_ns=memcpy, memset_ns=memset,
        overlap_pct=ratio(overlap, comm, 100.0), exposed_comm_fraction=ratio(exposed, duration),
        complete=bool(complete))
        for step, start, end, duration, compute, comm, overlap, exposed, idle, copy, memcpy, memset, complete in zip(
            *(frame[c].tolist() for c in cols))]


def _totals(steps: list[StepMetrics]) -> Totals:
    """Sums over steps, ratios recomputed from the sums (not averaged)."""
    keys = ("duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns", "copy_ns",
            "memcpy_ns", "memset_ns", "overlap_tax_ns", "effective_exposed_ns", "overlap_tax_compared",
            "overlap_tax_uncompared", "overlap_tax_low_ns", "overlap_tax_high_ns", "overlap_tax_varying")
    sums = {k: sum(getattr(s, k) for s in steps) for k in keys}
    return Totals(**sums, overlap_pct=ratio(sums["overlap_ns"], sums["comm_ns"], 100.0),
                  exposed_comm_fraction=ratio(sums["exposed_comm_ns"], sums["duration_ns"]),
                  perfect_overlap_step_ns=sum(s.perfect_overlap_step_ns for s in steps))


def _nccl_without_device(t: RankTrace, findings: list) -> bool:
    """A CPU-only trace of a run that used NCCL: say that the GPU was not recorded (once per rank)."""
    calls = overlap.nccl_host_calls(t)
    if not calls and t.meta.backend != "nccl":
        return False
    findings.append(Finding(
        id="no-gpu-activity", severity="warning", rank=t.meta.rank, step=None, verdict=None,
        evidence={"nccl_calls": calls, "gpus_listed": len(t.meta.device_names), "backend": t.meta.backend}))
    return True


def _device_name(t: RankTrace, device: int | None) -> str | None:
    names = t.meta.device_names
    if device is None or not names:
        return None
    return names[device] if 0 <= device < len(names) else names[0]
