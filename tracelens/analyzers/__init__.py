"""Analyzers: RankTraces in, a Report out. They never open files, print or exit."""

from __future__ import annotations

from ..model import RankTrace
from ..report import (Collective, InputFile, PreCapture, RankResult, Report, StepMetrics, Summary, Totals,
                      WarningEntry, ratio)
from . import copies, launch_order, overlap, pattern, straggler, syncs, wording
from .thresholds import Thresholds

__all__ = ["analyze", "Thresholds"]


def analyze(traces: list[RankTrace], thresholds: Thresholds | None = None) -> Report:
    """Compute the overlap report and the diagnoses for a run (one RankTrace per rank)."""
    th = thresholds or Thresholds()
    inputs, ranks, collectives, warnings, diagnoses = [], [], [], [], []
    for t in traces:
        notes: list[tuple[str, str, int]] = []

        def warn(code: str, message: str, count: int = 1, _notes=notes) -> None:
            if count > 0:
                _notes.append((code, message, int(count)))

        sets = overlap.interval_sets(t, warn)
        windows = overlap.step_windows(t, sets, warn)
        steps = _steps(overlap.step_metrics(sets, windows))
        exp = overlap.collective_exposure(t, sets)
        shapes = pattern.step_patterns(t, sets, windows, [s.overlap_pct for s in steps], exp, th)
        blind = sets.mode == "cpu" and _nccl_without_device(t, diagnoses)
        for st, (verdict, evidence) in zip(steps, shapes):
            if blind and st.comm_ns == 0:
                verdict = None      # NCCL ran, but on a GPU the profiler did not record: not "no-comm"
            st.pattern, st.pattern_evidence = verdict, evidence
            found = pattern.diagnose(t.meta.rank, st.step, verdict, evidence, st, sets.mode, th)
            if found is not None:
                diagnoses.append(found)
        if sets.mode == "gpu":
            durations = windows.end - windows.start
            diagnoses += syncs.analyze(t, sets.device, sets.busy, sets.comm, windows, durations, th)
            diagnoses += launch_order.analyze(t, sets.device, exp, windows, durations, th)
            diagnoses += copies.analyze(t, sets, windows, steps, th)
        pre = overlap.pre_capture(t, sets)
        verdict, counts = pattern.majority([s.pattern for s in steps])
        ranks.append(RankResult(
            rank=t.meta.rank, world_size=t.meta.world_size, device=sets.device,
            device_name=_device_name(t, sets.device), mode=sets.mode, source=t.meta.source,
            steps=steps, totals=_totals(steps), pattern=verdict, pattern_counts=counts,
            pre_capture=None if pre is None else PreCapture(**pre)))
        collectives += [
            Collective(rank=t.meta.rank, step=None if step < 0 else step, name=str(name),
                       op=op if isinstance(op, str) else None, bytes=None if size < 0 else size,
                       start_ns=start, duration_ns=dur, exposed_ns=exposed)
            for step, name, op, size, start, dur, exposed in zip(*(exp[c].tolist() for c in (
                "step", "name", "op", "bytes", "start_ns", "duration_ns", "exposed_ns")))]
        inputs.append(InputFile(path=t.meta.source, format=t.meta.format, rank=t.meta.rank, bytes=t.meta.bytes,
                                rank_rule=t.meta.rank_rule))
        inputs += [InputFile(path=f["path"], format=f["format"], rank=t.meta.rank, bytes=f["bytes"],
                             rank_rule="manifest") for f in t.meta.side_files]
        warnings += [WarningEntry(code=w.code, rank=t.meta.rank, count=w.count, message=w.message)
                     for w in t.meta.warnings]
        warnings += [WarningEntry(code=c, rank=t.meta.rank, count=n, message=m) for c, m, n in notes]
        warnings += [WarningEntry(code=w.code, rank=None, count=w.count, message=w.message)
                     for w in t.meta.input_warnings]
    diagnoses += straggler.find(ranks, th)
    order = {"no-gpu-activity": 0, "straggler": 1, "overlap-pattern": 2, "sync-stall": 3, "launch-order": 4,
             "memcpy-bound": 5}
    diagnoses.sort(key=lambda d: (d.rank, -1 if d.step is None else d.step, order.get(d.id, 9)))
    diagnoses = [wording.diagnosis(f) for f in diagnoses]      # analyzers find, the wording module words
    return Report(inputs=inputs, ranks=ranks, summary=_summary(ranks), collectives=collectives, warnings=warnings,
                  diagnoses=diagnoses)


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
            "memcpy_ns", "memset_ns")
    sums = {k: sum(getattr(s, k) for s in steps) for k in keys}
    return Totals(**sums, overlap_pct=ratio(sums["overlap_ns"], sums["comm_ns"], 100.0),
                  exposed_comm_fraction=ratio(sums["exposed_comm_ns"], sums["duration_ns"]))


def _summary(ranks: list[RankResult]) -> Summary:
    comm = sum(r.totals.comm_ns for r in ranks)
    overlap_ns = sum(r.totals.overlap_ns for r in ranks)
    exposed = sum(r.totals.exposed_comm_ns for r in ranks)
    duration = sum(r.totals.duration_ns for r in ranks)
    scored = [r for r in ranks if r.totals.exposed_comm_fraction is not None and r.totals.comm_ns > 0]
    worst = max(scored, key=lambda r: r.totals.exposed_comm_fraction).rank if scored else None
    step_ids = {s.step for r in ranks for s in r.steps}
    verdict, counts = pattern.majority([r.pattern for r in ranks])
    return Summary(ranks=len({r.rank for r in ranks}), steps=len(step_ids),
                   overlap_pct=ratio(overlap_ns, comm, 100.0), exposed_comm_fraction=ratio(exposed, duration),
                   worst_rank=worst, comm_ns=comm, exposed_comm_ns=exposed,
                   pattern=verdict, pattern_counts=counts)


def _nccl_without_device(t: RankTrace, diagnoses: list) -> bool:
    """A CPU-only trace of a run that used NCCL: say that the GPU was not recorded (once per rank)."""
    calls = overlap.nccl_host_calls(t)
    if not calls and t.meta.backend != "nccl":
        return False
    diagnoses.append(wording.Finding(
        id="no-gpu-activity", severity="warning", rank=t.meta.rank, step=None, verdict=None,
        evidence={"nccl_calls": calls, "gpus_listed": len(t.meta.device_names), "backend": t.meta.backend}))
    return True


def _device_name(t: RankTrace, device: int | None) -> str | None:
    names = t.meta.device_names
    if device is None or not names:
        return None
    return names[device] if 0 <= device < len(names) else names[0]
