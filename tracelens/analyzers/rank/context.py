"""What the per-rank analyzers share, built once per rank by :func:`build`: each analyzer takes the one
:class:`RankContext` and returns its parts (findings, rows, metrics), so none takes a long argument list or
fills a list it was handed."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...model.columns import matches
from ...model import RankTrace
from ...model.table import Table
from ...contract import StepMetrics, ratio
from ..seam import COMM_COLUMNS
from ..thresholds import Thresholds
from . import overlap, step_inference
from .overlap import Sets, Windows


@dataclass
class RankContext:
    """One rank under analysis: its trace and thresholds, and what every analyzer reads, computed once: the
    interval sets, the step windows and their durations, the step metrics (rows the analyzers complete), the
    per-collective exposure table and the comm table (``seam.COMM_COLUMNS``, the rank's collective
    instances; ``arrival`` adds the lead columns), the process groups' members, the device's name and the
    kind of program (``pytorch`` or ``cuda``)."""

    trace: RankTrace
    thresholds: Thresholds
    sets: Sets
    windows: Windows
    durations: np.ndarray
    steps: list[StepMetrics]
    exposure: Table
    comm: dict[str, np.ndarray]
    groups: dict[str, tuple[int, ...]]
    device_name: str | None
    program: str
    steps_from: str = "markers"        # where the steps came from (step_inference.SOURCES)

    @property
    def rank(self) -> int:
        return self.trace.meta.rank


def build(trace: RankTrace, thresholds: Thresholds, warn, steps_from: str = "auto",
          step_pattern: str | None = None) -> RankContext:
    """The context of one rank (``warn(code, message, count)`` takes what the interval sets and step windows
    count as they are built). The steps are settled first (``steps_from``, ``step_pattern``: as the
    :class:`~tracelens.analyzers.seam.Context` has them): marked, inferred or the whole capture."""
    sets = overlap.interval_sets(trace, warn)
    trace, source = step_inference.settle(trace, sets.device if sets.mode == "gpu" else None, steps_from,
                                          step_pattern, warn, cpu=sets.mode == "cpu")
    windows = overlap.step_windows(trace, sets, warn)
    exposure = overlap.collective_exposure(trace, sets)
    return RankContext(trace=trace, thresholds=thresholds, sets=sets, windows=windows,
                       durations=windows.end - windows.start,
                       steps=_steps(overlap.step_metrics(sets, windows)), exposure=exposure,
                       comm=_comm_table(trace, exposure), groups=_groups(trace.meta.pg_config),
                       device_name=_device_name(trace, sets.device), program=program(trace), steps_from=source)


_TORCH = re.compile(r"aten::|ProfilerStep#|autograd::|c10d::|record_param_comms|nccl:|gloo:|torch[._:]|"
                    r"Optimizer\.|DistributedDataParallel")


def program(trace: RankTrace) -> str:
    """``pytorch`` when the trace shows a PyTorch program (aten ops, torch's annotations or collective
    scopes), else ``cuda`` (a C/C++ CUDA or MPI program): advice that names torch settings fits only the
    first; the other gets CUDA-level advice."""
    host = trace.host_ops
    return "pytorch" if len(host) and bool(matches(host["name"], _TORCH, "search").any()) else "cuda"


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


def _device_name(t: RankTrace, device: int | None) -> str | None:
    names = t.meta.device_names
    if device is None or not names:
        return None
    return names[device] if 0 <= device < len(names) else names[0]
