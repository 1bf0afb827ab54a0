"""The tracks ``tracelens annotate`` adds to a rank's trace, as Trace Event Format events (the Chrome-trace JSON
that Perfetto UI and chrome://tracing open; docs/annotate.md).

Every number is the Report's own, or the analysis' where the Report does not hold it (the rank's exposed
intervals, :class:`RankSide`); nothing is measured here. The clock is the trace's: an event at ``ns`` (the
model's epoch nanoseconds) is written at ``ns - base_ns`` microseconds, with three decimals, as Kineto writes
its own ``ts``, so that the written times are exact to the nanosecond. A matched collective's member times,
which the Report holds on the reference rank's clock where the rank's offset was applied, are moved back onto
the rank's own clock.

The added events all sit in one process of their own (:func:`pid`), named ``tracelens: rank N``, one thread
per track, each named by a metadata event; every event carries the category
:data:`tracelens.model.annotation.CATEGORY`, by which a reader of the trace leaves them out. A track whose
intervals overlap (a rank's collectives on several streams) is spread over as many threads as it needs
("wait for peers", "wait for peers (2)", ...): Perfetto draws only nested slices on one thread.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass
from typing import Iterable, Sequence

import msgspec

from ..contract import Report
from ..model.annotation import CATEGORY, OVERLAY_HEAD

PID_BASE = 1_000_000_000       # above any OS process id (Linux: 2**22 at most), below 2**31: one pid per rank
STEPS, EXPOSED, WAIT, TRANSFER, FINDINGS = ("steps", "exposed communication", "wait for peers", "transfer",
                                            "findings")
OVERLAP_COUNTER, EXPOSED_COUNTER = ("overlap", "%"), ("exposed", "fraction")   # (name, series): the C events
_ENCODE = msgspec.json.Encoder().encode
_CAT = _ENCODE(CATEGORY)
MARK = b'{"ph":"M","cat":' + _CAT        # how the added events begin: the first is a metadata event


@dataclass
class RankSide:
    """What the annotation of one rank needs besides the Report: ``exposed``, the rank's exposed
    communication inside its step windows (starts, ends: the analysis' ``RankAnalysis.exposed``, epoch ns);
    ``base_ns``, what the trace's own times are counted from (``RunMeta.base_ns``); ``capture_start_ns``, the
    trace's first event (where a finding without a step is placed)."""

    exposed: tuple[Sequence[int], Sequence[int]]
    base_ns: int = 0
    capture_start_ns: int | None = None


def pid(rank: int) -> int:
    """The process of the added tracks of ``rank``: one per rank, so that ranks opened together stay apart."""
    return PID_BASE + rank


def events(report: Report, rank: int, side: RankSide) -> list[bytes]:
    """The added events of ``rank`` (one JSON object each, no separators): the track names first, then the
    steps, the exposed communication, the wait for peers and the transfer of each matched collective, the
    findings and the counters."""
    result = next(r for r in report.ranks if r.rank == rank)
    steps = result.steps
    starts = [s.start_ns for s in steps]
    tracks: list[tuple[str, list]] = [(STEPS, [(s.start_ns, s.end_ns, _step_name(s.step), msgspec.to_builtins(s))
                                               for s in steps])]
    exposed = [(int(s), int(e), "exposed communication", {"step": _step_at(steps, starts, int(s)),
                                                          "duration_ns": int(e) - int(s)})
               for s, e in zip(*side.exposed) if e > s]
    tracks += _lanes(EXPOSED, exposed)
    waits, moves = _collective_slices(report, rank)
    tracks += _lanes(WAIT, waits)
    tracks += _lanes(TRANSFER, moves)
    first = side.capture_start_ns if side.capture_start_ns is not None else (starts[0] if starts else side.base_ns)
    at_step = {s.step: s.start_ns for s in steps}
    tracks.append((FINDINGS, [
        (at_step.get(d.step, first) if d.step is not None else first, None, d.title,
         {"id": d.id, "severity": d.severity, "step": d.step, "detail": d.detail, "advice": d.advice,
          "evidence": d.evidence})
        for d in report.diagnoses if d.rank in (rank, -1)]))

    p, base = pid(rank), side.base_ns
    out = [_meta("process_name", p, 0, {"name": f"tracelens: rank {rank}"}),
           _meta("process_sort_index", p, 0, {"sort_index": -1})]
    for tid, (name, _) in enumerate(tracks, start=1):
        out.append(_meta("thread_name", p, tid, {"name": name}))
        out.append(_meta("thread_sort_index", p, tid, {"sort_index": tid}))
    for tid, (_, rows) in enumerate(tracks, start=1):
        out += [_slice(p, tid, base, *row) if row[1] is not None else _instant(p, tid, base, row[0], *row[2:])
                for row in rows]
    return out + _counters(steps, p, base)


def _step_name(step: int | None) -> str:
    return "whole capture" if step is None else f"step {step}"


def _step_at(steps, starts: list[int], at: int) -> int | None:
    """The step whose window holds ``at`` (the exposed set lies inside the windows)."""
    k = bisect_right(starts, at) - 1
    return steps[k].step if k >= 0 and at < steps[k].end_ns else None


def _collective_slices(report: Report, rank: int) -> tuple[list, list]:
    """Per matched collective that ``rank`` took part in: its wait for the other ranks, ``[start, end - T)``,
    and its transfer, ``[end - T, end)`` (T: the instance's transfer time, its shortest member), on the
    rank's own clock (docs/metrics.md, "Wait and transfer")."""
    cross = report.cross_rank
    if cross is None:
        return [], []
    mine = next((r for r in cross.ranks if r.rank == rank), None)
    offset = mine.clock_offset_ns if mine is not None and mine.clock_corrected and mine.clock_offset_ns else 0
    waits, moves = [], []
    for c in cross.collectives:
        if rank not in c.ranks or c.starts_ns is None or c.ends_ns is None:
            continue
        i = c.ranks.index(rank)
        start, end = c.starts_ns[i] + offset, c.ends_ns[i] + offset
        cut = end - c.transfer_ns
        args = {"op": c.op, "pg": c.pg, "seq": c.seq, "step": c.step, "bytes": c.bytes,
                "group_size": c.group_size, "ranks": c.ranks, "last_rank": c.last_rank,
                "arrival_skew_ns": c.arrival_skew_ns, "transfer_ns": c.transfer_ns, "wait_ns": cut - start,
                "instance_wait_ns": c.wait_ns, "busbw_gbps": c.busbw_gbps}
        label = c.op or "collective"
        if cut > start:
            waits.append((start, cut, f"wait: {label}", args))
        if end > cut:
            moves.append((cut, end, f"transfer: {label}", args))
    return waits, moves


def _lanes(name: str, rows: list) -> list[tuple[str, list]]:
    """``rows`` (start, end, name, args) spread over as few threads as keep each thread's slices apart:
    each goes to the first whose last slice ended by its start."""
    rows = sorted(rows, key=lambda r: (r[0], r[1]))
    ends: list[int] = []
    lanes: list[list] = []
    for row in rows:
        k = next((i for i, e in enumerate(ends) if e <= row[0]), len(ends))
        if k == len(ends):
            ends.append(row[1])
            lanes.append([])
        ends[k] = row[1]
        lanes[k].append(row)
    if not lanes:
        return [(name, [])]
    return [(name if k == 0 else f"{name} ({k + 1})", items) for k, items in enumerate(lanes)]


def _counters(steps, p: int, base: int) -> list[bytes]:
    """Overlap % and the exposed fraction of each step, from its start; 0 after a step that no step follows
    at once, and in a step where the ratio is undefined (no communication: the step's slice says null)."""
    out = []
    for k, s in enumerate(steps):
        for (name, series), value in ((OVERLAP_COUNTER, s.overlap_pct), (EXPOSED_COUNTER, s.exposed_comm_fraction)):
            out.append(_counter(name, series, s.start_ns, value or 0, p, base))
            if k + 1 == len(steps) or steps[k + 1].start_ns != s.end_ns:
                out.append(_counter(name, series, s.end_ns, 0, p, base))
    return out


def _us(ns: int) -> bytes:
    """``ns`` as microseconds with three decimals, exactly (what Kineto writes: ``1234.567``)."""
    whole, part = divmod(abs(int(ns)), 1000)
    return b"%s%d.%03d" % (b"-" if ns < 0 else b"", whole, part)


def _slice(p: int, tid: int, base: int, start: int, end: int, name: str, args: dict) -> bytes:
    return (b'{"ph":"X","cat":' + _CAT + b',"name":' + _ENCODE(name) + b',"pid":%d,"tid":%d,"ts":' % (p, tid)
            + _us(start - base) + b',"dur":' + _us(end - start) + b',"args":' + _ENCODE(args) + b"}")


def _instant(p: int, tid: int, base: int, at: int, name: str, args: dict) -> bytes:
    return (b'{"ph":"i","cat":' + _CAT + b',"name":' + _ENCODE(name) + b',"pid":%d,"tid":%d,"ts":' % (p, tid)
            + _us(at - base) + b',"s":"t","args":' + _ENCODE(args) + b"}")


def _counter(name: str, series: str, at: int, value, p: int, base: int) -> bytes:
    return (b'{"ph":"C","cat":' + _CAT + b',"name":' + _ENCODE(name) + b',"pid":%d,"tid":1,"ts":' % p
            + _us(at - base) + b',"args":' + _ENCODE({series: value}) + b"}")


def _meta(name: str, p: int, tid: int, args: dict) -> bytes:
    return (MARK + b',"name":' + _ENCODE(name) + b',"pid":%d,"tid":%d,"args":' % (p, tid)
            + _ENCODE(args) + b"}")


def document(added: Iterable[bytes], other: dict) -> Iterable[bytes]:
    """A whole trace of ``added`` events alone (the overlay of an nsys export), in pieces to write in turn;
    ``other``: what the spec's ``otherData`` says besides that it is an overlay (what of, its clock)."""
    rest = _ENCODE(other)
    yield OVERLAY_HEAD + (b"," + rest[1:] if other else b"}") + b',"displayTimeUnit":"ms","traceEvents":[\n'
    first = True
    for item in added:
        yield item if first else b",\n" + item
        first = False
    yield b"\n]}\n"
