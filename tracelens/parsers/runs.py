"""One run or several: traces of different runs must not be averaged into one report.

A directory a user points at may hold traces of several runs (a re-run, another world size, an old copy).
The traces are grouped by what identifies a run, and more than one group is a usage error (exit code 2)
naming the groups and how to pick one. The rule (docs/metrics.md, "Inputs"):

1. **Time**: sorted by the start of their first event, traces more than ``RUN_GAP_NS`` (one hour) after
   the previous one begin another run. The ranks of one run record the same steps, seconds apart at most.
2. **World size**: within that, different recorded world sizes are different runs; a trace without one
   joins the only world size there is (else it is a group of its own).
3. **Ranks**: one rank claimed by traces of two files is two runs. When the files' folders separate them,
   each folder is a run; when not, the group is still refused, naming the files.

A partial set of ranks of one run (rank 0 and 3 of 8) is one run, not an error.

Before that, every way of reading the inputs (``load``'s whole traces, a report's analysed Parts) settles
their ranks the same way, here: :func:`claim_ranks` on each file as it is read, :func:`settle` once every
file is.
"""

from __future__ import annotations

import os
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Callable

from ..errors import UsageError
from . import rundir
from .notes import describe_skipped

if TYPE_CHECKING:
    from ..model import RankTrace

RUN_GAP_NS = 3600 * 10**9
_EPOCH_FLOOR_NS = 10**17      # earlier than 1973: a capture-relative clock, not a date
_SHOWN = 4                    # runs described in the message


def claim_ranks(traces: list, given: dict[int, int] | None = None) -> list:
    """One file's traces as read: ``given`` numbers its traces that record no rank, by position (a second
    reading, once every file's ranks are known); a rank claimed twice inside the file is warned about (across
    files that is two runs, refused by :func:`check_one_run`); each numbered trace gets its run directory's
    side files."""
    for k, t in enumerate(traces):
        if t.meta.rank is None and given and k in given:
            number_by_order(t.meta, given[k])
    claimed = Counter(t.meta.rank for t in traces if t.meta.rank is not None)
    for t in traces:
        if t.meta.rank is not None and claimed[t.meta.rank] > 1:
            t.meta.warnings.add("duplicate-rank", f"{claimed[t.meta.rank]} traces claim rank {t.meta.rank}")
    rundir.attach(traces)
    return traces


def settle(files: list[tuple[Path, list]], skipped, renumber: Callable[[Path, list, dict[int, int]], list],
           note: Callable[[object, str, int], None]) -> list:
    """Every file's traces (whole RankTraces, or Parts analysed already: anything with ``meta`` and a first
    event), ``files`` in input order, as one run.

    A trace that records no rank takes the lowest number no other trace claims, in input order: ``renumber
    (path, items, {position: rank})`` gives a file's items their numbers and returns them. Then the run is
    checked to be one (:func:`check_one_run`), sorted by rank and file, and ``note(first, text, count)``
    puts the note on the ``skipped`` files on the first rank."""
    taken = {x.meta.rank for _, items in files for x in items if x.meta.rank is not None}
    nxt = 0
    out: list = []
    for path, items in files:
        given = {}
        for k, x in enumerate(items):
            if x.meta.rank is None:
                while nxt in taken:
                    nxt += 1
                taken.add(nxt)
                given[k] = nxt
        out += renumber(path, items, given) if given else items
    check_one_run(out)
    out.sort(key=lambda x: (x.meta.rank, x.meta.source))
    if skipped and out:
        note(out[0], describe_skipped(skipped), len(skipped))
    return out


def number_by_order(meta, rank: int) -> None:
    """Give a trace that records no rank the number ``rank`` by input order, with the warning saying so."""
    meta.rank, meta.rank_rule = rank, "order"
    meta.warnings.add("rank-unknown", rank_unknown(rank))


def rank_unknown(rank: int) -> str:
    return (f"no rank recorded in the trace (distributedInfo, RANK environment) or its file name; numbered "
            f"{rank} by input order")


def check_one_run(traces: list[RankTrace]) -> None:
    """Raise UsageError when ``traces`` hold more than one run (see the module's rule)."""
    if len(traces) < 2:
        return
    groups = run_groups(traces)
    repeated = [g for g in groups if _repeats(g)]
    if len(groups) == 1 and not repeated:
        return
    lines = [f"run {k}: {_describe(g)}" for k, g in enumerate(groups[:_SHOWN], 1)]
    if len(groups) > _SHOWN:
        lines.append(f"and {len(groups) - _SHOWN} more")
    if len(groups) > 1:
        text = f"the inputs hold {len(groups)} different runs ({_reasons(groups)}): " + "; ".join(lines)
        pick = f"point tracelens at one of them: its directory or a glob of its files (e.g. {_example(groups)})"
    else:
        text = "the inputs hold traces of different runs in one place: " + "; ".join(lines)
        pick = "name the files of one run (a glob or a list of files)"
    for g in repeated:
        text += "; " + _repeat_detail(g)
    raise UsageError(f"{text}. To report one run, {pick}")


def run_groups(traces: list[RankTrace]) -> list[list[RankTrace]]:
    """The traces grouped into runs, earliest run first."""
    starts = {id(t): _start_ns(t) for t in traces}
    timed = sorted((t for t in traces if starts[id(t)] is not None), key=lambda t: starts[id(t)])
    clusters: list[list[RankTrace]] = []
    last = None
    for t in timed:
        if last is None or starts[id(t)] - last > RUN_GAP_NS:
            clusters.append([])
        clusters[-1].append(t)
        last = starts[id(t)]
    untimed = [t for t in traces if starts[id(t)] is None]
    if untimed:                   # no event at all: nothing says which run; it joins the first
        clusters[:1] = [(clusters[0] if clusters else []) + untimed]
    groups = []
    for cluster in clusters:
        for group in _by_world_size(cluster):
            groups += _by_folder(group) if _repeats(group) else [group]
    return groups


def first_event_ns(t: RankTrace) -> int | None:
    """When a trace's first event starts (None without events): what its run is told by in time."""
    starts = [int(frame["start_ns"].min()) for frame in (t.host_ops, t.device_ops) if len(frame)]
    return min(starts) if starts else None


def _start_ns(t) -> int | None:
    # A trace already analysed and dropped (executors.Part) kept only its first event's time.
    return t.first_ns if hasattr(t, "first_ns") else first_event_ns(t)


def _by_world_size(cluster: list[RankTrace]) -> list[list[RankTrace]]:
    sizes: dict[int, list[RankTrace]] = {}
    unknown = []
    for t in cluster:
        if t.meta.world_size:
            sizes.setdefault(t.meta.world_size, []).append(t)
        else:
            unknown.append(t)
    if not sizes:
        return [unknown]
    if unknown and len(sizes) == 1:
        next(iter(sizes.values())).extend(unknown)
        unknown = []
    return list(sizes.values()) + ([unknown] if unknown else [])


def _repeats(group: list[RankTrace]) -> bool:
    """Whether a rank is claimed by traces of two different files (one nsys file may hold several
    processes; a repeat inside one file is that file's own matter, warned as ``duplicate-rank``)."""
    files = Counter(r for r, _ in {(t.meta.rank, t.meta.source) for t in group})
    return any(n > 1 for n in files.values())


def _by_folder(group: list[RankTrace]) -> list[list[RankTrace]]:
    folders: dict[str, list[RankTrace]] = {}
    for t in group:
        folders.setdefault(str(Path(t.meta.source).parent), []).append(t)
    parts = list(folders.values())
    return parts if len(parts) > 1 and not any(_repeats(p) for p in parts) else [group]


def _folder(paths) -> str:
    """The deepest folder holding every path (absolute when relative and absolute paths are mixed)."""
    parents = [str(Path(p).parent) for p in paths]
    try:
        return os.path.commonpath(parents)
    except ValueError:
        return os.path.commonpath([os.path.abspath(p) for p in parents])


def _describe(group: list[RankTrace]) -> str:
    sources = sorted({t.meta.source for t in group})
    folder = _folder(sources)
    names = [os.path.relpath(s, folder) for s in sources]
    shown = ", ".join(names[:3]) + (f", … ({len(names)} files)" if len(names) > 3 else "")
    size = next((t.meta.world_size for t in group if t.meta.world_size), None)
    start = min((s for s in map(_start_ns, group) if s is not None), default=None)
    return (f"world size {size if size else 'unknown'}, ranks {_ranks(sorted({t.meta.rank for t in group}))}, "
            f"{_when(start)}, {folder}{os.sep}: {shown}")


def _ranks(ranks: list[int]) -> str:
    spans, first = [], None
    for k, r in enumerate(ranks):
        if first is None:
            first = r
        if k + 1 == len(ranks) or ranks[k + 1] != r + 1:
            spans.append(str(first) if first == r else f"{first}-{r}")
            first = None
    return ", ".join(spans)


def _when(start: int | None) -> str:
    if start is None:
        return "no events"
    if start < _EPOCH_FLOOR_NS:
        return "capture-relative clock"
    return "started " + datetime.fromtimestamp(start / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _reasons(groups: list[list[RankTrace]]) -> str:
    reasons = []
    sizes = sorted({t.meta.world_size for g in groups for t in g if t.meta.world_size})
    if len(sizes) > 1:
        reasons.append("world sizes " + ", ".join(map(str, sizes)))
    starts = sorted(s for s in (min((x for x in map(_start_ns, g) if x is not None), default=None)
                                for g in groups) if s is not None)
    if len(starts) > 1 and starts[-1] - starts[0] > RUN_GAP_NS:
        reasons.append(f"starts {(starts[-1] - starts[0]) / 3.6e12:.1f} h apart")
    ranks = Counter(r for g in groups for r in {t.meta.rank for t in g})
    if any(n > 1 for n in ranks.values()):
        reasons.append("ranks recorded more than once")
    return "; ".join(reasons) or "traces that do not fit together"


def _example(groups: list[list[RankTrace]]) -> str:
    """A command reading only the first run: its folder when no other run's file is in it, else its files."""
    mine = sorted({t.meta.source for t in groups[0]})
    folder = os.path.abspath(_folder(mine))
    others = {os.path.abspath(t.meta.source) for g in groups[1:] for t in g}
    if not any(s.startswith(folder + os.sep) for s in others):
        return f"tracelens report {_folder(mine)}{os.sep}"
    return "tracelens report " + " ".join(mine[:3]) + (" …" if len(mine) > 3 else "")


def _repeat_detail(group: list[RankTrace]) -> str:
    by_rank: dict[int, set[str]] = {}
    for t in group:
        by_rank.setdefault(t.meta.rank, set()).add(t.meta.source)
    rank, files = next((r, sorted(f)) for r, f in sorted(by_rank.items()) if len(f) > 1)
    return f"rank {rank} is claimed by {' and '.join(files[:3])}" + (" and more" if len(files) > 3 else "")
