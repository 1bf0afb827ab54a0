"""What the per-rank analyzers share, so none of them takes a long argument list."""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ...model.columns import matches
from ...model import RankTrace
from ...model.table import Table
from ...contract import StepMetrics
from ..thresholds import Thresholds
from .overlap import Sets, Windows


@dataclass
class RankContext:
    """One rank under analysis: its trace, the interval sets and step windows computed once, the step
    metrics, the per-collective exposure table and the thresholds."""

    trace: RankTrace
    thresholds: Thresholds
    sets: Sets
    windows: Windows
    steps: list[StepMetrics]
    exposure: Table

    @property
    def durations(self) -> np.ndarray:
        return self.windows.end - self.windows.start

    @property
    def program(self) -> str:
        return program(self.trace)


_TORCH = re.compile(r"aten::|ProfilerStep#|autograd::|c10d::|record_param_comms|nccl:|gloo:|torch[._:]|"
                    r"Optimizer\.|DistributedDataParallel")


def program(trace: RankTrace) -> str:
    """``pytorch`` when the trace shows a PyTorch program (aten ops, torch's annotations or collective
    scopes), else ``cuda`` (a C/C++ CUDA or MPI program): advice that names torch settings fits only the
    first; the other gets CUDA-level advice."""
    host = trace.host_ops
    return "pytorch" if len(host) and bool(matches(host["name"], _TORCH, "search").any()) else "cuda"
