"""Matching collective instances across ranks (docs/metrics.md, "Across ranks: matching").

Every rank's collective table is concatenated once and grouped by key with sorts, never per event in Python.
A row's key is, from the strongest to the weakest:

- ``pg-seq``: (process group, seq), the number torch gives each collective of a group;
- ``pg-order``: (process group, step, order index of the rank's collectives of that group in that step);
- ``stream-order``: (communication stream, step, order index on that stream in that step), the stream being
  the rank's n-th communication stream by id (ids differ between processes).

An instance is matched when every rank expected in it has it (the group's members that were given, else
every rank with collectives in that group or stream) and they agree on op, dtype, size (all-to-all sizes may
differ: uneven splits) and group size. A disagreement stops matching that group from that instance on; a
missing member in an order key leaves that group's whole step unmatched (an instance lost in the middle
shifts every index after it, and identical collectives would still validate); nothing is ever paired across a
disagreement.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

import numpy as np

from ....model.columns import distinct, factorize

from ....contract import WarningEntry
from ...seam import LEAD_COLUMNS, RankAnalysis

KEYS = ("pg-seq", "pg-order", "stream-order")
_BIG = np.iinfo(np.int64).max
_CHECKED = ("op", "dtype", "bytes", "group_size")


@dataclass
class CollectiveRows:
    """Every rank's collective rows, concatenated; ``pos`` is the rank's position in the ordered analyses."""

    pos: np.ndarray
    cols: dict[str, np.ndarray]            # numeric COMM_COLUMNS, and op/dtype/pg_name as int codes (-1: none)
    names: dict[str, list]                 # code -> value of the coded columns

    def __len__(self) -> int:
        return len(self.pos)


@dataclass
class Match:
    rows: np.ndarray           # table rows of the matched instances, grouped by instance, rank order inside
    starts: np.ndarray         # first position in ``rows`` of each matched instance
    mode: np.ndarray           # per matched instance: index into KEYS
    order: np.ndarray          # per matched instance: its seq or order index
    key: str | None            # the weakest key any matched instance used
    unmatched: int             # rows not in a matched instance
    warnings: list[WarningEntry]


def concat(analyses: list[RankAnalysis]) -> CollectiveRows:
    sizes = [len(a.comm["start_ns"]) for a in analyses]
    pos = np.repeat(np.arange(len(analyses), dtype=np.int64), sizes)
    cols, names = {}, {}
    for c in ("step", "bytes", "group_size", "seq", "start_ns", "end_ns", "exposed_ns", "stream", "launch_ns",
              *LEAD_COLUMNS):
        # An analysis made before the lead columns existed has none: zeros (the late rank's reason is unknown).
        parts = [np.asarray(a.comm[c], dtype=np.int64) if c in a.comm else np.broadcast_to(np.int64(0), (n,))
                 for a, n in zip(analyses, sizes)]
        cols[c] = _joined(parts) if analyses else np.empty(0, np.int64)
    for c in ("op", "dtype", "pg_name"):
        values = _joined([np.asarray(a.comm[c], dtype=object) for a in analyses]) if analyses else \
            np.empty(0, object)
        if values.strides == (0,) and len(values):        # one value on every row: one code, as one view
            code, names[c] = _factorize(values[:1])
            cols[c] = np.broadcast_to(code, values.shape)
        else:
            cols[c], names[c] = _factorize(values)
    # Marked steps carry the program's own step numbers, the same on every rank; inferred ones are counted
    # on each rank from its capture's first whole cycle, which may differ by one between ranks: collectives
    # of those ranks are matched by order over the capture, as with none.
    marked = np.array([a.result.steps_from in (None, "markers", "nvtx") for a in analyses], dtype=bool)
    cols["key_step"] = cols["step"] if marked.all() else np.broadcast_to(np.int64(-1), pos.shape) \
        if not marked.any() else np.where(marked[pos], cols["step"], -1)
    return CollectiveRows(pos=pos, cols=cols, names=names)


def take(column: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``column[rows]``, a column of one value (a read-only view of it, ``_joined``) staying one such view."""
    if column.strides == (0,) and len(column):
        return np.broadcast_to(column[:1], rows.shape)
    return column[rows]


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """The parts concatenated; where every part is one value repeated (a read-only view of it: ranks from
    NCCL Inspector logs have no steps, streams or leads, analyzers/run/log_ranks.py), that value as one view
    again, so that thousands of such ranks cost no memory per row here (bench/RESULTS.md, "NCCL Inspector
    logs of thousands of ranks"). Where the parts are consecutive slices of one array (log_ranks.py makes
    every rank's table a slice of one table, in rank order), that array's span, not a copy."""
    if parts and all(p.ndim == 1 and p.strides == (0,) for p in parts):
        n = sum(len(p) for p in parts)
        if parts[0].dtype == object:
            values = [p[0] for p in parts if len(p)]
            if all(v is values[0] for v in values[1:]):       # one object (None: no dtype) on every rank
                return np.broadcast_to(np.array(values[0] if values else None, dtype=object), (n,))
        else:
            values = {int(p[0]) for p in parts if len(p)}
            if len(values) <= 1:
                return np.broadcast_to(np.int64(values.pop() if values else 0), (n,))
    span = _span(parts)
    return span if span is not None else np.concatenate(parts)


def _span(parts: list[np.ndarray]) -> np.ndarray | None:
    """The slice of one 1-D array that ``parts`` tile, in order, or None where they are not such slices."""
    parts = [p for p in parts if len(p)]        # an empty slice's address is not where it was cut
    base = parts[0].base if parts else None
    if base is None or not isinstance(base, np.ndarray) or base.ndim != 1 or not base.flags.c_contiguous:
        return None
    size = base.itemsize
    origin = base.__array_interface__["data"][0]
    at = first = parts[0].__array_interface__["data"][0]
    for p in parts:
        if p.base is not base or p.dtype != base.dtype or p.ndim != 1 or (len(p) > 1 and p.strides != (size,)) \
                or p.__array_interface__["data"][0] != at:
            return None
        at += len(p) * size
    lo = (first - origin) // size
    return base[lo:lo + (at - first) // size]


def _factorize(values: np.ndarray) -> tuple[np.ndarray, list]:
    """Codes in order of first appearance (None and NaN: -1) and the distinct values. combine must not import
    pandas (when every rank's analysis comes from the warm cache, nothing else does): pandas' factorize when
    it is loaded already (faster on large tables: bench/RESULTS.md, "analyzers/run/crossrank/match.py"),
    else a dict, which gives the same codes."""
    pd = sys.modules.get("pandas")
    if pd is not None:
        codes, uniques = pd.factorize(values, use_na_sentinel=True)
        return codes.astype(np.int64), list(uniques)
    return factorize(values)


def _segments(*keys: np.ndarray, by: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Sort order by ``keys`` (the last key sorts first, as np.lexsort) and the start of each run of equal
    keys in that order; with ``by``, runs are of the last ``by`` keys only (the others just order a run)."""
    packed = _packed(keys)
    order = np.argsort(packed, kind="stable") if packed is not None else np.lexsort(keys)
    if not len(order):
        return order, np.empty(0, np.int64)
    change = np.zeros(len(order), dtype=bool)
    change[0] = True
    run_keys = keys[len(keys) - (by or len(keys)):]
    run_packed = packed if len(run_keys) == len(keys) else _packed(run_keys)
    for k in ([run_packed] if run_packed is not None else run_keys):
        sk = k[order]
        change[1:] |= sk[1:] != sk[:-1]
    return order, np.flatnonzero(change)


def _packed(keys) -> np.ndarray | None:
    """The keys as one int64 that sorts as they do (np.lexsort order), or None when their ranges do not fit:
    one argsort of a million values is several times faster than a lexsort of five keys."""
    if not len(keys[0]):
        return None
    out = np.zeros(len(keys[0]), dtype=np.int64)
    scale = 1
    for k in keys:                               # the first key varies fastest
        lo, hi = int(k.min()), int(k.max())
        span = hi - lo + 1
        if scale * span >= 1 << 62:
            return None
        out += (k - lo) * scale
        scale *= span
    return out


def _index_within(order: np.ndarray, starts: np.ndarray) -> np.ndarray:
    """Per row (in table order): its index within its run (see :func:`_segments`)."""
    n = len(order)
    run_start = np.repeat(starts, np.diff(np.append(starts, n)))
    out = np.empty(n, dtype=np.int64)
    out[order] = np.arange(n) - run_start
    return out


def match(tab: CollectiveRows, ranks: np.ndarray, groups: dict[str, tuple[int, ...]]) -> Match:
    """Match the table's rows across ranks; ``ranks`` gives each position's rank, ``groups`` the members of
    the process groups the traces list."""
    c, n = tab.cols, len(tab)
    mode = np.where(c["pg_name"] >= 0, np.where(c["seq"] >= 0, 0, 1), 2)
    # The stream's ordinal among the rank's streams with collectives of no process group.
    bare = np.flatnonzero(mode == 2)
    gid = c["pg_name"]
    if len(bare):
        gid = gid.copy()
        o, st = _segments(c["stream"][bare], tab.pos[bare])
        run_pos = tab.pos[bare][o][st]
        ordinal = np.arange(len(st)) - np.searchsorted(run_pos, run_pos, side="left")
        sub = np.empty(len(bare), dtype=np.int64)
        sub[o] = np.repeat(ordinal, np.diff(np.append(st, len(bare))))
        gid[bare] = sub
    gkey = mode * (max(len(tab.names["pg_name"]), int(gid.max(initial=0)) + 1)) + gid
    # Every key a process-group seq (NCCL Inspector logs, traces with Seq): the step and the seq's stand-in
    # are one value, as one view (at thousands of ranks each array of every row counts).
    seqs = (mode == 0).all()
    kstep = np.broadcast_to(np.int64(0), (n,)) if seqs else np.where(mode == 0, 0, c["key_step"])
    # Order keys: the index by start within (rank, group, step); seq keys: the occurrence of a repeated seq.
    o, st = _segments(c["start_ns"], c["seq"] if seqs else np.where(mode == 0, c["seq"], -1), kstep, gkey, tab.pos,
                      by=4)
    within = _index_within(o, st)
    del o, st
    order = c["seq"] if seqs else np.where(mode == 0, c["seq"], within)
    occ = within if seqs else np.where(mode == 0, within, 0)
    del within

    o, st = _segments(tab.pos, occ, order, kstep, gkey, by=4)
    del occ
    cnt = np.diff(np.append(st, n))
    at = o[st]
    inst_gkey, inst_step, inst_order = gkey[at], kstep[at], order[at]
    inst_mode = mode[at]
    del at

    expected = _expected(tab, gkey, mode, ranks, groups)
    complete = (cnt >= 2) & (cnt == expected[inst_gkey])
    bad, why = _disagree(tab, o, st)
    idx = np.arange(len(st))
    # A disagreement stops its group from there on. With order keys, ranks holding different numbers of a
    # group's collectives in a step make every index of that step ambiguous (one lost in the middle shifts
    # the rest, and equal collectives would still validate): none of that step's are matched.
    cut_group = _first_in_run(inst_gkey, np.where(bad, idx, _BIG))
    ambiguous = _first_in_run(_run_ids(inst_gkey, inst_step), np.where(~complete & (inst_mode > 0), 0, 1)) == 0
    ok = complete & ~bad & (idx < cut_group) & ~ambiguous

    warnings = _warnings(tab, o, st, cnt, ok, bad, why, complete, cut_group, idx, inst_gkey, inst_order, mode)
    keep = np.repeat(ok, cnt)
    rows = o[keep]
    mstarts = np.concatenate([[0], np.cumsum(cnt[ok])[:-1]]).astype(np.int64) if ok.any() else np.empty(0, np.int64)
    used = inst_mode[ok]
    return Match(rows=rows, starts=mstarts, mode=used, order=inst_order[ok],
                 key=KEYS[int(used.max())] if len(used) else None, unmatched=int(n - keep.sum()), warnings=warnings)


def _run_ids(*keys: np.ndarray) -> np.ndarray:
    """Consecutive equal key tuples (already sorted) numbered 0, 1, …"""
    n = len(keys[0])
    change = np.zeros(n, dtype=bool)
    if n:
        change[0] = True
    for k in keys:
        change[1:] |= k[1:] != k[:-1]
    return np.cumsum(change) - 1


def _first_in_run(run_key: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Per element: the minimum of ``values`` over its run of equal (sorted) ``run_key``."""
    if not len(values):
        return values
    ids = _run_ids(run_key)
    starts = np.flatnonzero(np.diff(np.append(-1, ids)))
    return np.minimum.reduceat(values, starts)[ids]


def _expected(tab: CollectiveRows, gkey: np.ndarray, mode: np.ndarray, ranks: np.ndarray,
              groups: dict[str, tuple[int, ...]]) -> np.ndarray:
    """Per group key: how many of the given ranks an instance must have (members given, else the ranks with
    collectives under that key)."""
    size = int(gkey.max(initial=-1)) + 1
    out = np.zeros(size, dtype=np.int64)
    if not len(gkey):
        return out
    o, st = _segments(tab.pos, gkey)
    np.add.at(out, gkey[o][st], 1)
    present = set(ranks.tolist())
    names = tab.names["pg_name"]
    for g in distinct(gkey[mode < 2]).tolist():
        members = groups.get(str(names[tab.cols["pg_name"][np.flatnonzero(gkey == g)[0]]]))
        given = sum(r in present for r in members) if members else 0
        if given:
            out[g] = given
    return out


def _disagree(tab: CollectiveRows, o: np.ndarray, st: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate instance: whether its members disagree on a checked field, and which (index into
    _CHECKED, -1 when none)."""
    bad = np.zeros(len(st), dtype=bool)
    why = np.full(len(st), -1, dtype=np.int64)
    if not len(st):
        return bad, why
    a2a = [i for i, v in enumerate(tab.names["op"]) if v == "all_to_all"]
    for f, name in enumerate(_CHECKED):
        v = tab.cols[name][o]
        known = v >= 0
        if name == "bytes" and a2a:
            known &= ~np.isin(tab.cols["op"][o], a2a)
        lo = np.minimum.reduceat(np.where(known, v, _BIG), st)
        hi = np.maximum.reduceat(np.where(known, v, -1), st)
        this = (hi >= 0) & (lo != hi)
        why[this & ~bad] = f
        bad |= this
    return bad, why


def _warnings(tab, o, st, cnt, ok, bad, why, complete, cut_group, idx, inst_gkey, inst_order, mode) -> list:
    out = []
    stopped = ~ok & (idx >= cut_group)
    if stopped.any():
        first = np.flatnonzero(bad)[0]
        row = o[st[first]]
        pg = tab.names["pg_name"][tab.cols["pg_name"][row]] if tab.cols["pg_name"][row] >= 0 else None
        where = f"process group {pg}" if pg is not None else f"communication stream {tab.cols['stream'][row]}"
        groups = len(distinct(inst_gkey[bad]))
        out.append(WarningEntry(
            code="collective-mismatch", rank=None, count=int(cnt[stopped].sum()),
            message=f"ranks disagree on the {_CHECKED[why[first]].replace('_', ' ')} of a collective ({where}, "
                    f"{'seq' if mode[row] == 0 else 'order index'} {int(inst_order[first])}); {groups} group(s) "
                    f"not matched from there on: these collectives are left unmatched rather than paired wrongly"))
    missing = ~ok & ~stopped
    if missing.any():
        out.append(WarningEntry(
            code="unmatched-collectives", rank=None, count=int(cnt[missing].sum()),
            message="collectives not found on every rank expected in them (ranks not given, events filtered "
                    "or sub-sampled, capture windows that differ); left out of the cross-rank numbers"))
    if ok.any() and (mode[o[st[ok]]] == 2).any():
        out.append(WarningEntry(
            code="match-fallback", rank=None, count=int(cnt[ok & (mode[o[st]] == 2)].sum()),
            message="collectives without a process group were matched by their order on each rank's "
                    "communication stream within each step (weakest key): check that the ranks ran the same "
                    "collectives"))
    return out
