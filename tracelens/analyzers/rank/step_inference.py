"""Steps found in a capture that marks none (docs/metrics.md, "Inferred steps").

A training loop launches the same device work every iteration: the multiset of kernels launched between two
launches of a kernel that runs once per iteration is the same each time. The longest such repeating unit is the
step. Its boundary is placed after the optimizer (torch's ``Optimizer.step#`` range, or the optimizer's
kernels), else before the longest launch gap of the cycle (the host fetching the next batch).

Launch order, not device start order: kernels on several streams interleave differently every iteration on
the device, while one thread launches them in the program's order. On CPU-only runs the training thread's
ops are the device's work: the activities are the main thread's outermost ops in the order they ran (the
forward, each backward function, DDP's bucket copies, ``Optimizer.step#``), and the step begins after the
optimizer the same way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ...model import RankTrace
from ...model.columns import matches, percentile
from ...model.linking import LAUNCH_CATS, launched_before_capture, main_thread, step_of, take
from ...model.table import Table
from ...model.rank_trace import STEP_COLUMNS, empty_table

MIN_STEPS = 3              # fewer repeats than this are no evidence of a loop
MIN_SAME = 0.6             # share of the cycles whose kernels are the same multiset
MIN_COVER = 0.5            # share of the device activities those cycles hold
_OPTIMIZER_RANGE = r"Optimizer\.step#"
_OPTIMIZER_KERNELS = (r"multi_tensor_apply|_foreach_|[Ff]used_?([Aa]dam|[Ss]gd|[Ll]amb)|([Aa]dam[Ww]?|[Ss]gd|[Ll]amb)_?[Kk]ernel"
                      r"|[Oo]ptimi[sz]er")
_INPUT_COPY = r"\bHtoD\b|HostToDevice"
_SEED = 0x5EED             # the names' random weights, fixed: the same trace gives the same steps


@dataclass(frozen=True)
class Inferred:
    """What the inference found. ``steps`` holds the step spans when the period convinced, else None and
    ``why_not`` says what was missing."""

    steps: Table | None
    period: int = 0               # device activities per step
    boundary: str = ""            # the activity that begins each step
    phase: str = ""               # how the boundary was placed, in words
    median_ns: int = 0            # median step length, boundary to boundary on the device
    spread: float = 0.0           # the step lengths' spread: (p90 - p10) / median
    why_not: str = ""
    what: str = "device activities"   # what the period counts (CPU ops on CPU-only runs)


@dataclass(frozen=True)
class _Sequence:
    """The activities a period is looked for in, in the order the program issued them."""

    codes: np.ndarray          # each one's name, as a code
    at: np.ndarray             # when it was issued (its launch call's start; a CPU op's start)
    issued_end: np.ndarray     # when the issuing call returned (a CPU op's end)
    begins: np.ndarray         # when it ran (a kernel's start; a CPU op's start)
    copies: np.ndarray         # is an input copy (host to device)
    optimizer: np.ndarray      # is the optimizer's work
    names: object              # the name column the codes index (for the boundary's name)
    what: str                  # "device activities" or "CPU ops", for the words


def _device_sequence(trace: RankTrace, device: int | None) -> _Sequence | str:
    ops, host = trace.device_ops, trace.host_ops
    if device is None or not len(ops):
        return "no device activity to find a period in"
    launch = ops["launch_idx"]
    rows = np.flatnonzero((ops["device"] == device) & ~ops["kind"].isin(("sync",)) & (launch >= 0))
    if rows.size < 2 * MIN_STEPS:
        return "too few device activities with a launch call in the trace"
    at = take(host["start_ns"], launch[rows], 0)
    order = np.argsort(at, kind="stable")
    rows, at = rows[order], at[order]
    names = ops["name"]
    return _Sequence(codes=names.codes[rows].astype(np.int64), at=at, issued_end=take(host["end_ns"], launch[rows], 0),
                     begins=ops["start_ns"][rows], copies=matches(names, _INPUT_COPY, "search")[rows],
                     optimizer=matches(names, _OPTIMIZER_KERNELS, "search")[rows], names=names[rows],
                     what="device activities")


def _cpu_sequence(trace: RankTrace) -> _Sequence | str:
    host = trace.host_ops
    main = main_thread(host) if len(host) else None
    if main is None:
        return "no CPU op to find a period in"
    rows = np.flatnonzero((host["pid"] == main[0]) & (host["tid"] == main[1]) & host["cat"].isin(("cpu_op",))
                          & (np.asarray(host["parent"]) < 0))
    if rows.size < 2 * MIN_STEPS:
        return "too few CPU ops on the training thread"
    rows = rows[np.argsort(host["start_ns"][rows], kind="stable")]
    names = host["name"]
    start = np.asarray(host["start_ns"][rows], dtype=np.int64)
    return _Sequence(codes=names.codes[rows].astype(np.int64), at=start,
                     issued_end=np.asarray(host["end_ns"][rows], dtype=np.int64), begins=start,
                     copies=np.zeros(rows.size, dtype=bool),
                     optimizer=matches(names, _OPTIMIZER_RANGE, "search")[rows], names=names[rows], what="CPU ops")


def infer(trace: RankTrace, device: int | None, *, forced: bool = False, cpu: bool = False) -> Inferred:
    """The steps of a rank whose capture marks none, from the device work on ``device`` (``cpu``: a CPU-only
    run, from its training thread's ops). A cycle with no optimizer in it convinces only when ``forced``
    (``--steps-from inferred``): the blocks of a model repeat as regularly as steps do, and a capture shorter
    than a step shows only those."""
    seq = _cpu_sequence(trace) if cpu else _device_sequence(trace, device)
    if isinstance(seq, str):
        return Inferred(None, why_not=seq)
    codes, at, what = seq.codes, seq.at, seq.what
    found = _period(codes)
    if found is None:
        kind = "kernels" if what == "device activities" else what
        return Inferred(None, why_not=f"no sequence of {kind} repeats {MIN_STEPS} times or more")
    anchors, modal = found
    period = int(np.median(np.diff(anchors)[modal]))
    offset, phase = _phase(trace, seq, anchors, modal)
    if not phase.startswith("after") and not forced:
        return Inferred(None, period=period, why_not=f"a cycle of {period} {what} repeats "
                        f"{int(modal.sum())} times but holds no optimizer step (perhaps a block of the model "
                        "inside one step)")
    n = codes.size
    first = anchors + offset
    cuts = np.concatenate([first[:1] - period, first]) if first[0] - period >= 0 else first
    cuts = cuts[cuts < n]
    if n - cuts[-1] < period:          # the capture closed inside the last cycle: not a step
        cuts, tail = cuts[:-1], cuts[-1]
    else:
        tail = n
    if cuts.size < MIN_STEPS:
        return Inferred(None, why_not=f"fewer than {MIN_STEPS} whole cycles of {period} {what}")
    launch_end = seq.issued_end
    start = np.where(cuts > 0, launch_end[np.maximum(cuts - 1, 0)], at[cuts])
    end = np.append(start[1:], launch_end[tail - 1] + 1 if tail > 0 else start[-1] + 1)
    steps = Table({"step": np.arange(cuts.size, dtype=np.int64), "start_ns": start.astype(np.int64),
                   "end_ns": np.maximum(end, start + 1).astype(np.int64)})
    begins = seq.begins[cuts]
    lengths = np.diff(begins)
    median = int(np.median(lengths)) if lengths.size else 0
    p10, p90 = percentile(lengths, [10, 90]) if median > 0 else (0.0, 0.0)
    spread = float((p90 - p10) / median) if median > 0 else 0.0
    return Inferred(steps, period=period, boundary=str(seq.names[int(cuts[0])]), phase=phase, median_ns=median,
                    spread=spread, what=what)


def with_steps(trace: RankTrace, steps: Table) -> RankTrace:
    """The trace with ``steps`` as its step spans and every device activity's step taken from them, as the
    parsers assign a marked step (by the time of its launch; pre-capture work in none)."""
    ops, host = trace.device_ops, trace.host_ops
    launch = ops["launch_idx"]
    launch_time = np.where(launch >= 0, take(host["start_ns"], launch, 0), ops["start_ns"])
    step = step_of(launch_time, steps["start_ns"], steps["end_ns"], steps["step"])
    is_launch = host["cat"].isin(LAUNCH_CATS)
    early = launched_before_capture(ops["correlation"], launch, host["correlation"][is_launch])
    device = Table({**dict(ops.items()), "step": np.where(early, -1, step).astype(np.int64)})
    typed = Table({c: np.asarray(steps[c], dtype=np.int64) for c in STEP_COLUMNS})
    return RankTrace(meta=trace.meta, device_ops=device, host_ops=host, collectives=trace.collectives,
                     steps=typed, threads=trace.threads)


def _period(codes: np.ndarray):
    """The launches of the kernel that repeats with the longest regular cycle, and which of its cycles hold
    the modal multiset of kernels; None when no kernel repeats regularly."""
    weights = np.random.default_rng(_SEED).integers(1, 2**63, size=int(codes.max()) + 1, dtype=np.int64)
    # A cycle's multiset as one number: the sum of its kernels' random weights (wrapping), from prefix sums.
    prefix = np.concatenate([np.zeros(1, np.uint64), np.cumsum(weights[codes].astype(np.uint64), dtype=np.uint64)])
    order = np.argsort(codes, kind="stable")
    first = np.concatenate([[0], np.cumsum(np.bincount(codes))])      # where each code's launches begin in order
    counts = np.diff(first)
    best = None
    for code in np.argsort(counts, kind="stable"):        # fewest launches first: the longest cycles
        n = int(counts[code])
        if n < MIN_STEPS:
            continue
        if best is not None and n > best[2]:
            break
        at = order[first[code]:first[code] + n]             # in launch order: the sort was stable
        bags = prefix[at[1:]] - prefix[at[:-1]]
        values, inverse, seen = np.unique(bags, return_inverse=True, return_counts=True)
        top = int(np.argmax(seen))
        if seen[top] < max(MIN_STEPS - 1, MIN_SAME * bags.size):
            continue
        same = inverse.reshape(-1) == top
        length = int(np.median(np.diff(at)[same]))
        if np.diff(at)[same].sum() < MIN_COVER * codes.size:       # a motif inside the step, not the step
            continue
        if best is None or length > best[3]:
            best = (at, same, n, length)
    return None if best is None else best[:2]


def _phase(trace, seq: _Sequence, anchors, modal) -> tuple[int, str]:
    """Where in the cycle a step begins, as an offset from the anchor kernel, and the rule that placed it.

    A loop steps after its optimizer and then fetches the next batch: the step begins with the batch's
    host-to-device copy when the cycle has one, else with the first launch after the optimizer. Without an
    optimizer in sight, at the longest launch gap of the cycle (the host fetching the batch)."""
    lengths = np.diff(anchors)[modal]
    period = int(np.median(lengths))
    same = anchors[:-1][modal][lengths == period]
    at = seq.at
    copies = seq.copies[same[0]:same[0] + period]
    gap = np.zeros(at.size, dtype=np.int64)
    gap[1:] = np.diff(at)
    typical = np.median(gap[same[:, None] + np.arange(period)[None, :]], axis=0)
    offset, phase = _after_optimizer(trace, seq, anchors, modal)
    if offset is not None:
        offset %= period
        if copies.any():
            # The step begins with the next batch's copy, the first at or after the optimizer's end: work
            # launched between the two (a pipelined loop's next-batch work) is the step's that ends.
            ahead = int(np.flatnonzero(np.roll(copies, -offset))[0])
            return (offset + ahead) % period, phase + ", at the next input copy"
        return offset, phase
    if copies.any():
        first = np.flatnonzero(copies & ~np.roll(copies, 1))        # where each run of copies begins
        first = first if first.size else np.flatnonzero(copies)
        return int(first[np.argmax(typical[first])]), "input copy after the longest launch gap"
    return int(np.argmax(typical)), "longest launch gap"


def _after_optimizer(trace, seq: _Sequence, anchors, modal) -> tuple[int | None, str]:
    """The offset of the first launch after the optimizer: after torch's ``Optimizer.step#`` range, else
    after the optimizer's last kernel of the cycle."""
    host = trace.host_ops
    ends = host["end_ns"][matches(host["name"], _OPTIMIZER_RANGE)]
    if ends.size:
        after = np.searchsorted(seq.at, np.sort(ends), side="left")
        offset = _mode_offset(after[after < seq.at.size], anchors)
        if offset is not None:
            return offset, "after the optimizer step"
    optimizer = seq.optimizer
    lasts = []
    for k in np.flatnonzero(modal):
        hit = np.flatnonzero(optimizer[anchors[k]:anchors[k + 1]])
        if hit.size:
            lasts.append(anchors[k] + int(hit[-1]) + 1)
    offset = _mode_offset(np.array(lasts, dtype=np.int64), anchors) if lasts else None
    return offset, "after the optimizer's kernels"


def _mode_offset(points: np.ndarray, anchors: np.ndarray) -> int | None:
    """The most common offset of ``points`` from the anchor before each, when it holds for most of them."""
    k = np.searchsorted(anchors, points, side="right") - 1
    ok = k >= 0
    if ok.sum() < MIN_STEPS - 1:
        return None
    offsets = points[ok] - anchors[k[ok]]
    values, seen = np.unique(offsets, return_counts=True)
    top = int(np.argmax(seen))
    return int(values[top]) if seen[top] >= MIN_SAME * ok.sum() else None


SOURCES = ("markers", "nvtx", "inferred", "whole-capture")     # a rank's steps_from in the Report


def settle(trace: RankTrace, device: int | None, steps_from: str, step_pattern: str | None,
           warn, cpu: bool = False) -> tuple[RankTrace, str]:
    """The rank's trace with the steps the report uses, and where they came from (one of :data:`SOURCES`).

    ``steps_from`` is the option: ``auto`` takes the marked steps (``ProfilerStep#N``, or the ranges
    ``--step-nvtx`` names), else inferred ones, else the whole capture; ``markers``, ``inferred`` and
    ``whole`` insist on one. ``warn(code, message, count)`` says which was taken when it is not the markers,
    and why inference was refused."""
    marked = "nvtx" if step_pattern else "markers"
    if steps_from == "whole":
        if len(trace.steps):
            warn("no-steps", "--steps-from whole: the step markers are set aside and the whole capture is "
                 "reported as one step", 1)
            trace = with_steps(trace, empty_table(STEP_COLUMNS))
        else:
            warn("no-steps", f"no {_markers(step_pattern)}: the whole capture is reported as one step", 1)
        return trace, "whole-capture"
    if len(trace.steps) and steps_from != "inferred":
        return trace, marked
    if steps_from == "markers":
        warn("no-steps", f"no {_markers(step_pattern)}: the whole capture is reported as one step", 1)
        return trace, "whole-capture"
    found = infer(trace, device, forced=steps_from == "inferred", cpu=cpu)
    if found.steps is None:
        asked = "--steps-from inferred" if steps_from == "inferred" else f"no {_markers(step_pattern)}"
        warn("no-steps", f"{asked}, and no steps inferred: {found.why_not}; the whole capture is reported as "
             "one step", 1)
        return (with_steps(trace, empty_table(STEP_COLUMNS)) if len(trace.steps) else trace), "whole-capture"
    asked = "--steps-from inferred" if len(trace.steps) else f"no {_markers(step_pattern)}"
    warn("steps-inferred", f"{asked}: {len(found.steps)} steps "
         f"inferred from a cycle of {found.period} {found.what} repeating, each beginning at "
         f"{found.boundary} ({found.phase}); median step {found.median_ns / 1e6:.3f} ms, spread "
         f"{100 * found.spread:.1f} % (p90 - p10 over the median)", 1)
    return with_steps(trace, found.steps), "inferred"


def _markers(step_pattern: str | None) -> str:
    return f"host range matching --step-nvtx {step_pattern!r}" if step_pattern else "ProfilerStep#N ranges"
