"""The timeline of one step of one rank: its activity per lane (stream, or main thread and gloo workers in CPU
mode) and its exposed communication, clipped to the step window that ``overlap`` uses for the metrics."""

from __future__ import annotations

import numpy as np

from ...model.columns import distinct, isin
from ...model import RankTrace
from ...model.step_timeline import Lane, StepTimeline
from .. import intervals as iv
from . import overlap, step_inference

MAX_SHAPES = 50_000      # past this many intervals, gaps below a pixel are closed
PIXELS = 2_000           # the widest plot the drill-down is drawn at


def step_timeline(trace: RankTrace, step: int | None, *, max_shapes: int = MAX_SHAPES,
                  pixels: int = PIXELS, steps_from: str = "auto", step_pattern: str | None = None) -> StepTimeline:
    """Lanes and exposed communication of ``step`` (None: the whole capture, one step); KeyError if the rank
    has no such step. ``steps_from``, ``step_pattern``: the steps as the report settled them."""
    quiet = lambda *a, **k: None        # noqa: E731 - the report said it already
    sets = overlap.interval_sets(trace, quiet)
    trace, _ = step_inference.settle(trace, sets.device if sets.mode == "gpu" else None, steps_from,
                                     step_pattern, quiet, cpu=sets.mode == "cpu")
    w = overlap.step_windows(trace, sets, quiet)
    want = -1 if step is None else step
    hit = np.flatnonzero(w.step == want)
    if hit.size == 0:
        raise KeyError(step)
    lo, hi = int(w.start[hit[0]]), int(w.end[hit[0]])
    lanes = _gpu_lanes(trace, sets.device, lo, hi) if sets.mode == "gpu" else [
        Lane("main thread", {"compute": iv.clip(sets.compute, lo, hi)}),
        Lane("gloo", {"comm": iv.clip(sets.comm, lo, hi)})]
    exposed = iv.clip(iv.subtract(sets.comm, sets.compute), lo, hi)
    shapes = _count(lanes, exposed)
    gap = 0
    if shapes > max_shapes:
        # One pixel of the widest plot: shorter gaps cannot be seen, and drawing them costs the browser.
        gap = max((hi - lo) // pixels, 1)
        lanes = [Lane(ln.name, {k: iv.close_gaps(iv.union(*v), gap) for k, v in ln.spans.items()})
                 for ln in lanes]
        exposed = iv.close_gaps(exposed, gap)
        shapes = _count(lanes, exposed)
    return StepTimeline(rank=trace.meta.rank, step=step, start_ns=lo, end_ns=hi, mode=sets.mode, lanes=lanes,
                        exposed=exposed, merged_below_ns=gap, shapes=shapes, source=trace.meta.source)


def _gpu_lanes(trace: RankTrace, device, lo: int, hi: int) -> list[Lane]:
    ops = trace.device_ops
    s, e = ops["start_ns"], ops["end_ns"]
    on = (ops["device"] == device) & (e > lo) & (s < hi)
    stream = ops["stream"]
    name = ops["name"].to_numpy()
    kinds = {k: on & isin(ops["kind"], (k,)) for k in ("compute", "comm", "memcpy", "memset", "sync")}
    lanes = []
    for st in distinct(stream[on]):
        here = stream == st
        spans, names = {}, {}
        for kind, of_kind in kinds.items():
            rows = np.flatnonzero(here & of_kind)
            if rows.size:
                rows = rows[np.argsort(s[rows], kind="stable")]      # each activity kept, for its hover
                spans[kind] = (np.maximum(s[rows], lo), np.minimum(e[rows], hi))
                names[kind] = [str(n) for n in name[rows]]
        lanes.append(Lane(f"stream {int(st)}", spans, names))
    return lanes


def _count(lanes: list[Lane], exposed) -> int:
    return sum(v[0].size for ln in lanes for v in ln.spans.values()) + exposed[0].size
