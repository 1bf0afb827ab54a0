"""Formatting shared by the human-readable renderers (numbers only; no metric is computed here)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from ..units import IEC, cut, kernel_name, size  # noqa: F401 - the renderers' sizes and names are every output's
from ..contract import MIXED, SEVERITIES, RankResult, Report

# Findings about the run rather than one rank's steps (step null), by id: what to call their scope.
RUN_LEVEL = {"straggler": "across ranks", "clock-offset": "across ranks", "slow-link": "across ranks",
             "nccl-transport": "whole run"}
# Past this many steps a rank is a long capture: its step table is shown in short (run_tables.step_summary),
# and a finding over steps that are not consecutive names their runs, at most STEP_RUNS_SHOWN of them
# (steps_label), where a short one names every step.
STEPS_ALL_UP_TO = 50
STEP_RUNS_SHOWN = 6


def ms(ns: int | None, decimals: int = 3) -> str:
    return "—" if ns is None else f"{ns / 1e6:,.{decimals}f}"


def pct(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} %"


def frac(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def step_label(step: int | None) -> str:
    return "all" if step is None else str(step)


STEP_HEADERS = ("step", "duration ms", "compute ms", "comm ms", "overlap ms", "exposed comm ms", "idle ms",
                "copy ms", "overlap %", "exposed frac", "pattern")
STEP_LEFT = ("step", "pattern")          # the columns of words, aligned left (the numbers right)
EXPOSED_HEADERS = ("rank", "op", "size", "count", "exposed ms", "worst ms", "worst step", "kernel")
EXPOSED_LEFT = ("rank", "op", "kernel")


def two_lines(header: str) -> str:
    """``"exposed comm ms"`` -> ``"exposed\ncomm ms"``: a header over two lines, for narrow tables."""
    return header.replace(" ", "\n", 1)


def step_cells(s, decimals: int = 3) -> list[str]:
    label = step_label(s.step) + ("" if getattr(s, "complete", True) else " (cut)")
    return [label] + _time_cells(s, decimals) + [pct(s.overlap_pct), frac(s.exposed_comm_fraction), s.pattern or ""]


def total_cells(t, decimals: int = 3) -> list[str]:
    return ["total"] + _time_cells(t, decimals) + [pct(t.overlap_pct), frac(t.exposed_comm_fraction), ""]


def _time_cells(s, decimals: int) -> list[str]:
    return [ms(ns, decimals) for ns in (s.duration_ns, s.compute_ns, s.comm_ns, s.overlap_ns, s.exposed_comm_ns,
                                        s.idle_ns, s.copy_ns)]


@dataclass
class ExposedGroup:
    """The exposed instances of one collective (same rank, kernel name, op and size), shown as one row."""

    rank: int
    name: str
    op: str | None
    bytes: int | None
    count: int                 # instances with exposed time
    calls: int                 # all instances of it on the rank, hidden ones included
    exposed_ns: int            # the instances' exposed times, summed
    worst_ns: int              # the largest exposed time of one instance
    worst_step: int | None     # the step of that instance


def exposed_groups(report: Report, top: int) -> list[ExposedGroup]:
    """The ``top`` collectives with the most exposed time in total, identical ones grouped (display only:
    the report lists every instance with its own ``exposed_ns``)."""
    groups: dict[tuple, list] = {}
    for c in report.collectives:
        g = groups.get(key := (c.rank, c.name, c.op, c.bytes))
        if g is None:
            g = groups[key] = [0, 0, 0, 0, None, 0]     # count, calls, exposed, worst, its step, its start
        g[1] += 1
        if c.exposed_ns > 0:
            g[0] += 1
            g[2] += c.exposed_ns
            if c.exposed_ns > g[3] or (c.exposed_ns == g[3] and c.start_ns < g[5]):
                g[3], g[4], g[5] = c.exposed_ns, c.step, c.start_ns
    ranked = sorted((k for k, g in groups.items() if g[2] > 0), key=lambda k: (-groups[k][2], k[0], groups[k][5]))
    return [ExposedGroup(rank, name, op, size_, *groups[(rank, name, op, size_)][:5])
            for rank, name, op, size_ in ranked[:top]]


def plural(n: int, one: str, many: str) -> str:
    return f"{n} {one if n == 1 else many}"


def has_steps(r: RankResult) -> bool:
    """Whether the rank's windows are numbered steps (without ProfilerStep the one window is the whole trace)."""
    return any(s.step is not None for s in r.steps)


def pattern_label(pattern: str | None, counts: dict[str, int], of: str) -> str:
    """``sawtooth``; a mixed one with its counts, most first: ``mixed (steps: two-phase 2, sawtooth 1)``
    (``of``: what the counts count, steps for a rank, ranks for the run)."""
    if pattern != MIXED or not counts:
        return pattern or ""
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])       # stable: equal counts keep the report's order
    return f"{pattern} ({of}: " + ", ".join(f"{p} {n}" for p, n in ranked) + ")"


def pre_capture_line(r: RankResult) -> str:
    """The rank's work launched before the capture in one line (``""`` without any), named as the
    ``launched-before-capture`` warning names it: ``pre-capture (in no step): 13 kernels, 6.700 ms busy
    (1.600 ms comm)``."""
    pc = r.pre_capture
    if pc is None:
        return ""
    what = [plural(n, one, many) for n, one, many in ((pc.kernels, "kernel", "kernels"),
                                                       (pc.copies, "copy", "copies")) if n]
    of_it = [f"{ms(ns)} ms {name}" for ns, name in ((pc.comm_ns, "comm"), (pc.copy_ns, "copy")) if ns]
    # Without numbered steps the one step is the whole capture (the step table's "all"), and it holds this work
    # too.
    where = "in no step" if has_steps(r) else "in the one step"
    return (f"pre-capture ({where}): {', '.join(what + [f'{ms(pc.busy_ns)} ms busy'])}"
            + (f" ({', '.join(of_it)})" if of_it else ""))


def tax_line(r: RankResult) -> str:
    """The rank's overlap tax in one line: ``overlap tax: 0.480 ms (interval 0.400-0.520 ms; 12 kernels under
    communication compared with their runs alone, 8 without enough of them, 3 whose work varies); effective
    exposed comm 0.680 ms``. ``""`` when no kernel under communication could be compared: a line per rank
    saying the tax is 0 because nothing was measured would read as a measurement (the counts stay in the
    JSON). A report written before the interval existed has none to show (its high end reads 0)."""
    t = r.totals
    n, u, v = t.overlap_tax_compared, t.overlap_tax_uncompared, t.overlap_tax_varying
    if n == 0:
        return ""
    interval = f"interval {ms(t.overlap_tax_low_ns)}-{ms(t.overlap_tax_high_ns)} ms; " \
        if t.overlap_tax_high_ns else ""
    rest = (f", {u} without enough of them" if u else "") + (f", {v} whose work varies" if v else "")
    return (f"overlap tax: {ms(t.overlap_tax_ns)} ms ({interval}{plural(n, 'kernel', 'kernels')} under "
            f"communication compared with their runs alone{rest}); effective exposed comm "
            f"{ms(t.effective_exposed_ns)} ms")


def rank_title(r) -> str:
    where = f"GPU {r.device}" if r.device is not None else "CPU"
    name = f" ({r.device_name})" if r.device_name else ""
    world = f"/{r.world_size}" if r.world_size else ""
    # Steps that no marker gave are said where the step table begins (the warnings say how they were found).
    steps = {"inferred": " · steps inferred", "whole-capture": " · the whole capture as one step"}.get(
        r.steps_from or "", "")
    return f"rank {r.rank}{world} · {where}{name}{steps} · {r.source}"


@dataclass
class DiagnosisGroup:
    """Diagnoses of one rank with the same id and wording, shown once with the steps they cover: each number
    of the sentences is the range of the members' values, and a finding over several steps speaks per step
    (:func:`per_step`)."""

    rank: int
    id: str
    severity: str
    title: str
    steps: list
    detail: str
    advice: str
    where: str = ""            # what it covers: its steps, or (step null) "across ranks", "whole rank"...
    texts: list = field(default_factory=list)   # (title, detail, advice) of every member, as the report has them
    of: int = 0                # the rank's steps (steps_label: a long capture's are named in short)


def findings(report: Report) -> list[DiagnosisGroup]:
    """Group the report's diagnoses for display: a rank's diagnoses of one id whose sentences differ only in
    their numbers are one entry, in the order of the first; the most severe member gives the severity."""
    groups: dict[tuple, list] = {}
    for d in report.diagnoses:
        groups.setdefault((d.rank, d.id, d.step is None, _skeleton(d.title), _skeleton(d.detail),
                           _skeleton(d.advice)), []).append(d)
    stepped = {r.rank for r in report.ranks if has_steps(r)}
    counts = {r.rank: len(r.steps) for r in report.ranks}
    out = []
    for (rank, id_, *_), ds in groups.items():
        worst = max(ds, key=lambda d: SEVERITIES.index(d.severity) if d.severity in SEVERITIES else 0)
        steps = [d.step for d in ds]
        texts = [(d.title, d.detail, d.advice) for d in ds]
        of = counts.get(rank, 0)
        title, detail, advice = _worded(texts, steps, of)
        out.append(DiagnosisGroup(rank, id_, worst.severity, title, steps, detail, advice,
                                  finding_scope(id_, steps, rank in stepped, of), texts, of))
    return out


_NUMBER = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?![\w.])")


@dataclass
class Recurring:
    """Findings of the same kind, scope and wording on several ranks, shown as one entry (display only: the
    report keeps every rank's own diagnosis): the ranks, and each number of the sentences as the range of the
    members' values."""

    ranks: list[int]
    total: int                 # ranks in the report
    id: str
    severity: str
    where: str
    title: str
    detail: str
    advice: str

    @property
    def who(self) -> str:
        if len(self.ranks) == 1:
            return rank_label(self.ranks[0])
        return f"ranks {ranges(self.ranks)} ({len(self.ranks)} of {self.total})"


def recurring(report: Report, rank: int | None = None) -> list[Recurring]:
    """The report's findings with those that recur on several ranks merged (``rank``: that rank's alone,
    unmerged), in the order of their first member."""
    found = [f for f in findings(report) if rank is None or f.rank == rank]
    groups: dict[tuple, list] = {}
    for f in found:
        groups.setdefault((f.id, f.where, *(_skeleton(t) for t in f.texts[0]), f.rank < 0), []).append(f)
    total = len({r.rank for r in report.ranks})
    out = []
    for members in groups.values():
        worst = max(members, key=lambda f: SEVERITIES.index(f.severity) if f.severity in SEVERITIES else 0)
        out.append(Recurring(sorted({f.rank for f in members}), total, worst.id, worst.severity, worst.where,
                             *_worded([t for f in members for t in f.texts], members[0].steps, members[0].of)))
    return out


@functools.lru_cache(maxsize=4096)
def _skeleton(text: str) -> str:
    """The sentence with its numbers as ``#`` (cached: ranks repeat each other's sentences)."""
    return _NUMBER.sub("#", text)


def _worded(texts: list[tuple], steps: list, of: int = 0) -> tuple[str, str, str]:
    """(title, detail, advice) of the members' sentences of one wording: each number ranged, then said per
    step when they cover several (``of``: the rank's steps, as steps_label takes them)."""
    return per_step(*(_ranged([t[k] for t in texts]) for k in range(3)), steps, of)


def _ranged(texts: list[str]) -> str:
    """One sentence of the same wording from several: each number the members' lowest–highest."""
    if len(set(texts)) == 1:
        return texts[0]
    numbers = [_NUMBER.findall(t) for t in texts]
    parts = _NUMBER.split(texts[0])
    out = [parts[0]]
    for i, rest in enumerate(parts[1:]):
        values = sorted({n[i] for n in numbers}, key=lambda v: float(v.replace(",", "")))
        out.append(values[0] if len(values) == 1 else f"{values[0]}–{values[-1]}")
        out.append(rest)
    return "".join(out)


# What a finding's sentences call its one step (analyzers/wording/), and what a finding over several steps
# says instead.
_THIS_STEP = (" in this step", "this step", "exposed here")
_EACH_STEP = ("", "each of these steps", "exposed in each step")


def per_step(title: str, detail: str, advice: str, steps: list, of: int = 0) -> tuple[str, str, str]:
    """The sentences of one step's finding, said of each of its ``steps`` when there are several: the detail
    opens with ``in each of steps 3–6:`` (its own "in this step" dropped), and "this step" elsewhere becomes
    "each of these steps"; every number is then a per-step value (ranged when the steps differ). ``of``: the
    rank's steps (steps_label)."""
    if len({s for s in steps if s is not None}) < 2:
        return title, detail, advice
    detail = detail.replace(_THIS_STEP[0], _EACH_STEP[0])
    title, advice = (_each_step(t) for t in (title, advice))
    return title, f"in each of {steps_label(steps, of)}: {detail}", advice


def _each_step(text: str) -> str:
    for one, each in zip(_THIS_STEP[1:], _EACH_STEP[1:]):
        text = text.replace(one, each)
    return text


def finding_scope(id_: str, steps: list, rank_has_steps: bool, of: int = 0) -> str:
    """What a finding covers: its steps (``of``: the rank's, as steps_label takes them); without a step, the
    run (``across ranks``: a straggler is measured against the other ranks), the ``whole trace`` when the rank
    has no numbered steps (its one window), else the ``whole rank`` (about all of its steps at once, as no GPU
    activity is)."""
    if any(s is not None for s in steps):
        return steps_label(steps, of)
    if id_ in RUN_LEVEL:
        return RUN_LEVEL[id_]
    return "whole rank" if rank_has_steps else "whole trace"


def steps_label(steps: list, of: int = 0) -> str:
    """``step 3``, ``steps 2–4`` (consecutive) or ``steps 2, 5, 7``; ``whole trace`` without steps. Of a rank
    with more than STEPS_ALL_UP_TO steps (``of``), steps that are not consecutive are named by their runs,
    ``steps 2–37, 145–180, 288``, and past STEP_RUNS_SHOWN runs by how many they are, the first runs and the
    last: ``312 of 1000 steps (2–37, 145–180, 288–323, 431–466, 574–609, …, 860–894)``: the line stays short
    however long the capture (the Report lists every step's finding)."""
    nums = sorted(s for s in steps if s is not None)
    if not nums:
        return "whole trace"
    if len(nums) == 1:
        return f"step {nums[0]}"
    # Counted, not listed: the steps of a saved report are untrusted, and a range from -2^63 is no list.
    if len(set(nums)) == len(nums) == nums[-1] - nums[0] + 1:
        return f"steps {nums[0]}–{nums[-1]}"
    if of <= STEPS_ALL_UP_TO:
        return "steps " + ", ".join(map(str, nums))
    runs = _runs(nums)
    if len(runs) <= STEP_RUNS_SHOWN:
        return "steps " + ", ".join(runs)
    return f"{len(nums)} of {of} steps ({', '.join(runs[:STEP_RUNS_SHOWN - 1])}, …, {runs[-1]})"


def sources_line(report: Report) -> str | None:
    """Which ranks came from traces and which from NCCL Inspector logs, and what paired the two (a report
    with traces of some ranks and the logs of the others); None for any other report."""
    ins = report.inspector
    if ins is None or not ins.traced:
        return None
    logs = f"ranks {ranges(ins.ranks)} from NCCL Inspector logs" if ins.ranks else "no rank from logs alone"
    pairs = "; ".join(f"process group {p.pg} is communicator {p.comm}, coll_sn = Seq {p.sn_offset:+d} "
                      f"({p.agreed} of {p.of} traced collectives agree)" for p in ins.paired)
    return (f"ranks {ranges(ins.traced)} from traces (steps, overlap, exposure), {logs} (collectives, waits, "
            f"arrivals only): {pairs}")


def ranges(values: list[int]) -> str:
    """``0, 2–5, 9``: sorted integers with runs collapsed."""
    return ", ".join(_runs(values))


def _runs(values: list[int]) -> list[str]:
    """``["0", "2–5", "9"]``: the runs of consecutive values among the sorted integers."""
    out, run = [], []
    for v in sorted(values):
        if run and v == run[-1] + 1:
            run.append(v)
            continue
        if run:
            out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
        run = [v]
    if run:
        out.append(str(run[0]) if len(run) == 1 else f"{run[0]}–{run[-1]}")
    return out


def rank_label(rank: int) -> str:
    """``rank 3``; ``all ranks`` for a finding about the run that names no rank (rank -1)."""
    return "all ranks" if rank < 0 else f"rank {rank}"
