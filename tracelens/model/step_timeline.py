"""The step timeline of one rank and step (the dashboard's drill-down): per lane, the intervals of each kind of
activity, clipped to the step's window. Small by construction: one rank, one step, intervals merged below a
pixel when there would be too many to draw. Built by ``analyzers.rank.lanes``, drawn by
``renderers.timeline_figure``, fetched through ``api.step_timeline``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass
class Lane:
    name: str                                          # "stream 7", "main thread", ...
    spans: dict[str, tuple[np.ndarray, np.ndarray]]    # kind -> (starts, ends), absolute ns, sorted, disjoint
    names: dict[str, list[str]] = field(default_factory=dict)   # kind -> each span's activity name (unmerged)


@dataclass
class StepTimeline:
    rank: int
    step: int | None
    start_ns: int                                      # the step's window (docs/metrics.md, Steps)
    end_ns: int
    mode: str                                          # "gpu" | "cpu"
    lanes: list[Lane]
    exposed: tuple[np.ndarray, np.ndarray]             # communication under no compute, in the window
    merged_below_ns: int = 0                           # gaps shorter than this were closed (0: none)
    shapes: int = 0                                    # intervals drawn, after any merging
    source: str = ""
    notes: list[str] = field(default_factory=list)
