"""NCCL Inspector logs of every rank beside traces of some: the logs' collectives keyed as the traces' (docs/metrics.md,
"From NCCL Inspector logs").

A trace keys a collective by torch's process group and Seq; Inspector by NCCL's communicator hash (``header.id``)
and its own count (``coll_sn``). Nothing in either names the other, and the two counts need not agree (NCCL
counts from the communicator's creation, torch from the group's; a group may be served by a communicator
made later, or by several). A traced rank has both, so the traced ranks teach the mapping: for a process
group and a communicator of the same size, the offset ``coll_sn − Seq`` at which the same collectives line up
on every traced rank (same op, same size, the same kernel duration to the tolerance below). Identical
collectives repeat every step, so a run whose steps are alike fits several offsets equally well; then the
clocks decide, where the logs and the traces are on the same clock (the offset whose kernels start at the
same instant), else nothing is paired. A process group that cannot be paired is counted, never guessed.

The ranks without a trace then get their log rows re-keyed (process group, ``coll_sn − offset``) and moved
onto the trace clock of their host (the median difference of the traced ranks' log and trace end times on
that host, where it has one), and the cross-rank analysis matches them with the traced ranks' as any ranks.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from ...contract import WarningEntry
from ..seam import RankAnalysis
from ..thresholds import Thresholds

# Inspector writes whole µs, so each end of a kernel is floored (< 2 µs on a duration), and its kernel times
# come from the profiler plugin rather than from CUPTI: a few µs either way, and a little more on long kernels.
_TOL_NS = 5_000
_TOL_SHARE = 0.02
_ANCHORS = 16              # collectives of a group per traced rank that propose offsets
_AGREE = 0.9               # the share of a group's traced collectives an offset must line up
_CHECKED = 8               # offsets checked on every collective, of those most anchors propose


@dataclass
class Pair:
    pg: str                # the traces' process group
    comm: str              # the Inspector communicator (header.id) serving it
    offset: int            # coll_sn - Seq
    agreed: int            # traced collectives of the group that lined up, over every traced rank
    of: int                # traced collectives of the group


@dataclass
class Pairing:
    pairs: list[Pair] = field(default_factory=list)
    analyses: list[RankAnalysis] = field(default_factory=list)   # the ranks without a trace, keyed as traces
    traced: list[int] = field(default_factory=list)              # the traced ranks the logs also hold
    warnings: list[WarningEntry] = field(default_factory=list)


@dataclass
class _Fit:
    pg: str
    comm: str
    offset: int
    agreed: int
    of: int
    shift: dict            # log host -> list of (log end - trace end) of its traced ranks' agreeing rows

    def median_shift(self) -> float:
        every = [d for v in self.shift.values() for d in v]
        return float(np.median(every)) if every else float("inf")


def join(traced: list[RankAnalysis], logged: list[RankAnalysis], th: Thresholds) -> Pairing:
    """Pair the logs' communicators with the traces' process groups on the ranks both hold, and return the
    log ranks without a trace keyed as the traces (``logged``: log_ranks.analyses' RankAnalyses)."""
    out = Pairing()
    logs = {a.rank: a for a in logged}
    mine: dict[int, RankAnalysis] = {}
    for a in traced:
        mine.setdefault(a.rank, a)
    both = sorted(set(mine) & set(logs))
    out.traced = both
    if not both:
        out.warnings.append(_unpaired(0, "no traced rank is among the ranks of the logs"))
        return out
    fits: list[_Fit] = []
    unpaired: list[str] = []
    for pg in _groups(mine[r] for r in both):
        fit, why = _fit(pg, [(mine[r], logs[r]) for r in both], th)
        if fit is None:
            unpaired.append(f"process group {pg}: {why}")
        else:
            fits.append(fit)
    # A communicator serves one process group: two groups fitting one communicator are both doubtful.
    served = Counter(f.comm for f in fits)
    for f in [f for f in fits if served[f.comm] > 1]:
        unpaired.append(f"process group {f.pg}: its communicator {f.comm} fits another group as well")
    fits = [f for f in fits if served[f.comm] == 1]
    out.pairs = [Pair(pg=f.pg, comm=f.comm, offset=f.offset, agreed=f.agreed, of=f.of) for f in fits]
    if unpaired:
        out.warnings.append(_unpaired(len(unpaired), "; ".join(unpaired[:4])))
    if not fits:
        return out
    shift = {}
    for f in fits:
        for host, v in f.shift.items():
            shift.setdefault(host, []).extend(v)
    shift = {h: int(np.round(np.median(v))) for h, v in shift.items() if v}
    by_comm = {f.comm: f for f in fits}
    desc = _descriptions(mine[r] for r in both)
    window = _windows(mine[r] for r in both)
    dropped = 0
    for a in sorted(logged, key=lambda x: x.rank):
        if a.rank in mine:
            continue
        names = np.asarray(a.comm["pg_name"], dtype=object)
        keep = np.isin(names, list(by_comm)) if len(names) else np.zeros(0, bool)
        dropped += int((~keep).sum())
        rows = np.flatnonzero(keep)
        comm = {k: np.asarray(v)[rows] for k, v in a.comm.items()}
        comm_of = names[rows]
        comm["pg_name"] = np.array([by_comm[c].pg for c in comm_of], dtype=object)
        comm["pg_desc"] = np.array([desc.get(by_comm[c].pg) for c in comm_of], dtype=object)
        comm["seq"] = comm["seq"] - np.array([by_comm[c].offset for c in comm_of], dtype=np.int64)
        # The logs run the whole job, the traces a capture: what the traced ranks did not capture has no
        # traced member to match, and is not the captured run's.
        lo = np.array([window[by_comm[c].pg][0] for c in comm_of], dtype=np.int64)
        hi = np.array([window[by_comm[c].pg][1] for c in comm_of], dtype=np.int64)
        inside = (comm["seq"] >= lo) & (comm["seq"] <= hi)
        comm = {k: v[inside] for k, v in comm.items()}
        # Onto the trace clock of its host, where a traced rank of that host showed how the two clocks differ;
        # elsewhere its host's log clock stays, and clocks.py aligns it from matched end times as any host's.
        d = shift.get(a.host, 0)
        comm["start_ns"] = comm["start_ns"] - d
        comm["end_ns"] = comm["end_ns"] - d
        groups = {by_comm[c].pg: a.groups[c] for c in by_comm if c in a.groups}
        out.analyses.append(dataclasses.replace(a, comm=comm, groups=groups))
    if dropped:
        out.warnings.append(WarningEntry(code="inspector-unpaired-rows", rank=None, count=dropped, message=(
            "NCCL Inspector: collectives of ranks without a trace on communicators paired with no traced process "
            "group: left out")))
    return out


def _unpaired(count: int, why: str) -> WarningEntry:
    return WarningEntry(code="inspector-unpaired", rank=None, count=max(count, 1), message=(
        f"NCCL Inspector logs and traces not paired ({why}): the ranks without a trace are left out of that "
        "process group's cross-rank numbers"))


def _groups(analyses) -> list[str]:
    """The process groups whose collectives the traces number (Seq): only a number can be offset."""
    out: dict = {}
    for a in analyses:
        names = np.asarray(a.comm["pg_name"], dtype=object)
        seq = np.asarray(a.comm["seq"], dtype=np.int64)
        for name in names[(seq >= 0) & (names != None)].tolist():  # noqa: E711 (object arrays)
            out.setdefault(str(name), None)
    return list(out)


def _windows(analyses) -> dict:
    """Per process group: the first and last Seq the traces captured."""
    out: dict = {}
    for a in analyses:
        names = np.asarray(a.comm["pg_name"], dtype=object)
        seq = np.asarray(a.comm["seq"], dtype=np.int64)
        for name in set(names[(seq >= 0) & (names != None)].tolist()):  # noqa: E711 (object arrays)
            got = seq[(names == name) & (seq >= 0)]
            lo, hi = out.get(str(name), (int(got.min()), int(got.max())))
            out[str(name)] = (min(lo, int(got.min())), max(hi, int(got.max())))
    return out


def _descriptions(analyses) -> dict:
    out: dict = {}
    for a in analyses:
        for name, d in zip(a.comm["pg_name"].tolist(), a.comm["pg_desc"].tolist()):
            if name is not None and d is not None:
                out.setdefault(str(name), d)
    return out


def _rows(a: RankAnalysis, mask: np.ndarray) -> dict:
    c = a.comm
    return {"seq": np.asarray(c["seq"], np.int64)[mask], "op": np.asarray(c["op"], object)[mask],
            "bytes": np.asarray(c["bytes"], np.int64)[mask], "group": np.asarray(c["group_size"], np.int64)[mask],
            "end": np.asarray(c["end_ns"], np.int64)[mask],
            "dur": (np.asarray(c["end_ns"], np.int64) - np.asarray(c["start_ns"], np.int64))[mask]}


def _close(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(a - b) <= _TOL_NS + _TOL_SHARE * np.maximum(a, b)


def _fit(pg: str, ranks: list[tuple[RankAnalysis, RankAnalysis]], th: Thresholds) -> tuple[_Fit | None, str]:
    """The communicator and offset whose collectives line up with the group's on every traced rank, or None
    and why not."""
    per_rank = []
    votes: Counter = Counter()
    near: dict = {}            # (communicator, offset) -> the least |log end - trace end| of its anchors
    anchors = 0
    for t, lg in ranks:
        tnames = np.asarray(t.comm["pg_name"], dtype=object)
        tr = _rows(t, (tnames == pg) & (np.asarray(t.comm["seq"], np.int64) >= 0))
        lnames = np.asarray(lg.comm["pg_name"], dtype=object)
        comms = {str(c): _sorted(_rows(lg, lnames == c)) for c in dict.fromkeys(lnames.tolist())}
        per_rank.append((t, lg, tr, comms))
        picks = np.unique(np.linspace(0, len(tr["seq"]) - 1, min(_ANCHORS, len(tr["seq"]))).astype(np.int64)) \
            if len(tr["seq"]) else np.empty(0, np.int64)
        anchors += len(picks)
        for i in picks.tolist():
            for c, lr in comms.items():
                ok = _same(tr, i, lr)
                gap = np.abs(lr["end"][ok] - tr["end"][i]).tolist()
                for d, g in zip((lr["seq"][ok] - tr["seq"][i]).tolist(), gap):
                    near[c, d] = min(near.get((c, d), g), g)
                for d in set((lr["seq"][ok] - tr["seq"][i]).tolist()):
                    votes[c, d] += 1
    if not anchors:
        return None, "no numbered collective"
    # Offsets most anchors propose, checked on every collective of the group: the best voted first, and among
    # equals the one whose kernels end nearest in time (alike steps vote alike; one clock puts the right one
    # at no distance).
    proposed = sorted((k for k, n in votes.items() if n >= anchors / 2), key=lambda k: (-votes[k], near[k], k))
    fits = [_check(pg, c, d, per_rank) for c, d in proposed[:_CHECKED]]
    good = [f for f in fits if f.agreed >= _AGREE * f.of]
    if not good:
        return None, "no communicator's collectives line up with its collectives (op, size, kernel time)"
    # Offsets left unchecked may fit as well as the checked ones: then only the clock can tell.
    if len(good) > 1 or len(proposed) > _CHECKED:
        # Alike steps fit several offsets; the kernels' own start times settle it where both are on one clock.
        same = [f for f in good if abs(f.median_shift()) <= th.clock_max_spread_ns]
        if len(same) != 1:
            return None, (f"{len(good)} offsets between coll_sn and Seq fit equally (alike steps) and the logs' "
                          "clock is not the traces'")
        good = same
    return good[0], ""


def _sorted(rows: dict) -> dict:
    order = np.argsort(rows["seq"], kind="stable")
    return {k: v[order] for k, v in rows.items()}


def _same(tr: dict, i: int, lr: dict) -> np.ndarray:
    """Which of a communicator's log rows could be the traced collective ``i``: its op, size, group size
    and kernel time (unknown trace values agree with anything)."""
    ok = _close(lr["dur"], tr["dur"][i])
    if tr["op"][i] is not None:
        ok &= lr["op"] == tr["op"][i]
    if tr["bytes"][i] >= 0:
        ok &= lr["bytes"] == tr["bytes"][i]
    if tr["group"][i] > 0:
        ok &= lr["group"] == tr["group"][i]
    return ok


def _check(pg: str, comm: str, offset: int, per_rank) -> _Fit:
    """How many of the group's traced collectives, over every traced rank, line up with the communicator's
    log row at ``coll_sn = Seq + offset``; and, per log host, how the log clock stood against the trace's."""
    agreed = of = 0
    shift: dict = {}
    for t, lg, tr, comms in per_rank:
        of += len(tr["seq"])
        lr = comms.get(comm)
        if lr is None or not len(lr["seq"]) or not len(tr["seq"]):
            continue
        want = tr["seq"] + offset
        at = np.minimum(np.searchsorted(lr["seq"], want), len(lr["seq"]) - 1)
        ok = lr["seq"][at] == want
        ok &= _close(lr["dur"][at], tr["dur"])
        known = tr["op"] != None  # noqa: E711 (object arrays)
        ok &= ~known | (lr["op"][at] == tr["op"])
        ok &= (tr["bytes"] < 0) | (lr["bytes"][at] == tr["bytes"])
        ok &= (tr["group"] <= 0) | (lr["group"][at] == tr["group"])
        agreed += int(ok.sum())
        shift.setdefault(lg.host, []).extend((lr["end"][at][ok] - tr["end"][ok]).tolist())
    return _Fit(pg=pg, comm=comm, offset=offset, agreed=agreed, of=of, shift=shift)
