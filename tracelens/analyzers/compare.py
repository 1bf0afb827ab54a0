"""Two Reports compared (``tracelens diff BEFORE AFTER``; docs/metrics.md, "Comparing two runs"): their step
times, each cause's cost and the culprit side by side; what BEFORE's verdict predicted for the change that
was made against what AFTER shows; which kernels, CPU ops, collectives and idle time got faster or slower.

It reads the two Reports only (a saved report.json compares as well as traces): the work by name is the
Reports' ``summary.work``, the collectives their ``collectives``. Runs of different world size, step count or
model are compared and the differences named in ``notes``, never refused.
"""

from __future__ import annotations

import statistics

from ..contract import Report
from ..contract.two_runs import CauseChange, Diff, DiffSide, NameChange, Prediction
from ..units import size
from .wording.comparison import summary_sentence

TOP_CHANGES = 15            # changes listed, largest first
HELD_WITHIN = 0.15          # a prediction holds within its interval or this share of itself


def compare(before: Report, after: Report, before_label: str, after_label: str) -> Diff:
    b, a = _side(before, before_label), _side(after, after_label)
    change = a.step_ns - b.step_ns
    causes = _causes(before, after)
    prediction = _prediction(causes, before, -change)
    notes = _notes(before, after, b, a)
    return Diff(summary=summary_sentence(b, a, change, prediction), before=b, after=a, step_change_ns=change,
                step_change=change / b.step_ns if b.step_ns else None, prediction=prediction, causes=causes,
                changes=_changes(before, after), notes=notes)


def _complete(r):
    return [s for s in r.steps if s.complete] or r.steps


def _side(rep: Report, label: str) -> DiffSide:
    means = [statistics.fmean(s.duration_ns for s in _complete(r)) for r in rep.ranks if r.steps]
    modes = {r.mode for r in rep.ranks}
    worlds = [r.world_size for r in rep.ranks if r.world_size]
    culprit = next((c.culprit for c in (rep.verdict.causes if rep.verdict else []) if c.culprit is not None), None)
    return DiffSide(label=label, ranks=len(rep.ranks), world_size=max(worlds) if worlds else None,
                    steps=int(statistics.median(len(_complete(r)) for r in rep.ranks)) if rep.ranks else 0,
                    mode=modes.pop() if len(modes) == 1 else "mixed",
                    step_ns=int(round(statistics.fmean(means))) if means else 0,
                    headline=rep.verdict.headline if rep.verdict else "", culprit=culprit)


def _causes(before: Report, after: Report) -> list[CauseChange]:
    was = {c.cause: c for c in (before.verdict.causes if before.verdict else [])}
    now = {c.cause: c for c in (after.verdict.causes if after.verdict else [])}
    out = []
    for name in [*was, *(n for n in now if n not in was)]:
        c = was.get(name)
        out.append(CauseChange(cause=name, before_ns=c.ns_per_step if c else None,
                               after_ns=now[name].ns_per_step if name in now else None,
                               predicted_ns=c.saving_ns if c else None,
                               predicted_low_ns=c.saving_low_ns if c else None,
                               predicted_high_ns=c.saving_high_ns if c else None))
    return out


def _prediction(causes: list[CauseChange], before: Report, observed: int) -> Prediction | None:
    """The change's cause: the BEFORE cause whose cost fell the most (none fell: no prediction to check)."""
    fell = [(c.before_ns - (c.after_ns or 0), c) for c in causes if c.before_ns is not None]
    fell = [(d, c) for d, c in fell if d > 0]
    if not fell:
        return None
    _, c = max(fell, key=lambda dc: (dc[0], -[x.cause for x in causes].index(dc[1].cause)))
    if c.predicted_ns is None:
        why = next((x.saving_note for x in before.verdict.causes if x.cause == c.cause), None)
        return Prediction(cause=c.cause, predicted_ns=None, predicted_low_ns=None, predicted_high_ns=None,
                          observed_ns=observed, held=None, note=why)
    inside = c.predicted_low_ns <= observed <= c.predicted_high_ns
    near = abs(observed - c.predicted_ns) <= HELD_WITHIN * abs(c.predicted_ns)
    return Prediction(cause=c.cause, predicted_ns=c.predicted_ns, predicted_low_ns=c.predicted_low_ns,
                      predicted_high_ns=c.predicted_high_ns, observed_ns=observed, held=inside or near)


def _per_step_work(rep: Report) -> dict[tuple[str, str], tuple[float, int]]:
    return {(w.kind, w.name): (w.count_per_step, w.ns_per_step) for w in rep.summary.work}


def _per_step_collectives(rep: Report) -> dict[tuple[str, str], tuple[float, int]]:
    """Per (op, size): the count and time per rank and complete step."""
    steps = {(r.rank, s.step) for r in rep.ranks for s in _complete(r)}
    if not steps:
        return {}
    sums: dict[tuple[str, str], list] = {}
    for c in rep.collectives:
        if (c.rank, c.step) not in steps:
            continue
        key = ("collective", f"{c.op or c.name} {size(c.bytes)}" if c.bytes is not None else
               f"{c.op or c.name} (size not in the trace)")
        m = sums.setdefault(key, [0, 0])
        m[0] += 1
        m[1] += c.duration_ns
    n = len(steps)
    return {k: (count / n, int(round(ns / n))) for k, (count, ns) in sums.items()}


def _idle(rep: Report) -> dict[tuple[str, str], tuple[float, int]]:
    idle = [s.idle_ns for r in rep.ranks for s in _complete(r)]
    return {("idle", "device idle" if any(r.mode == "gpu" for r in rep.ranks) else "no compute or communication"):
            (1.0, int(round(statistics.fmean(idle))))} if idle else {}


def _changes(before: Report, after: Report) -> list[NameChange]:
    out = []
    for part in (_per_step_work, _per_step_collectives, _idle):
        was, now = part(before), part(after)
        for key in [*was, *(k for k in now if k not in was)]:
            (bc, bn), (ac, an) = was.get(key, (0.0, 0)), now.get(key, (0.0, 0))
            if bn or an:
                out.append(NameChange(kind=key[0], name=key[1], before_count=round(bc, 3), after_count=round(ac, 3),
                                      before_ns=bn, after_ns=an, change_ns=an - bn))
    out.sort(key=lambda c: (-abs(c.change_ns), c.kind, c.name))
    return out[:TOP_CHANGES]


def _notes(before: Report, after: Report, b: DiffSide, a: DiffSide) -> list[str]:
    notes = []
    if b.world_size != a.world_size or b.ranks != a.ranks:
        notes.append(f"the runs have different sizes: {b.ranks} rank(s) of world size {b.world_size} before, "
                     f"{a.ranks} of {a.world_size} after; step times are means over each run's own ranks")
    if b.mode != a.mode:
        notes.append(f"the runs ran on different devices: {b.mode} before, {a.mode} after")
    if b.steps != a.steps:
        notes.append(f"the runs have {b.steps} and {a.steps} complete steps per rank: times are per step")
    was, now = _per_step_work(before), _per_step_work(after)
    total = sum(ns for _, ns in was.values())
    gone = sum(ns for k, (_, ns) in was.items() if k not in now)
    if total and gone > total / 2:
        notes.append(f"{gone / total:.0%} of BEFORE's time per step is in kernels or ops AFTER does not run: "
                     "a different model, build or input, so the names are not the same work")
    return notes
