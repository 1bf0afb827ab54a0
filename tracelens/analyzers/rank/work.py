"""A rank's work by name: what took its steps' time, kernel by kernel (a GPU rank: its analysed device's
kernels, copies and collectives) or op by op (a CPU rank: its CPU ops by self time, so that an op is not
counted again in the ops it calls), per complete step. ``tracelens diff`` compares two runs' (docs/metrics.md,
"Comparing two runs")."""

from __future__ import annotations

import numpy as np

from .context import RankContext

TOP = 100          # names kept per rank, by time: a long tail of tiny kernels says nothing about a change


def by_name(ctx: RankContext) -> list[tuple[str, str, float, float]]:
    """(name, kind, count per step, ns per step) of the rank's ``TOP`` names by time, over its complete steps
    (every step when none is complete); an activity belongs to the step its start falls in. ``kind``:
    compute, comm, memcpy, memset or sync on a GPU rank; ``cpu-op`` or ``comm`` (gloo's) on a CPU rank."""
    steps = [s for s in ctx.steps if s.complete] or ctx.steps
    if not steps:
        return []
    lo = np.array([s.start_ns for s in steps], dtype=np.int64)
    hi = np.array([s.end_ns for s in steps], dtype=np.int64)
    order = np.argsort(lo, kind="stable")
    lo, hi = lo[order], hi[order]
    t = ctx.trace
    if ctx.sets.mode == "gpu":
        ops = t.device_ops
        keep = ops["device"] == ctx.sets.device if ctx.sets.device is not None else np.ones(len(ops), bool)
        time = (ops["end_ns"] - ops["start_ns"]).astype(np.float64)
        kind_code, kind_names = ops["kind"].codes, list(ops["kind"].categories)
    else:
        ops = t.host_ops
        cats = ops["cat"]
        keep = cats.codes == (list(cats.categories).index("cpu_op") if "cpu_op" in list(cats.categories) else -2)
        dur = (ops["end_ns"] - ops["start_ns"]).astype(np.float64)
        parent = ops["parent"]
        children = np.zeros(len(ops), dtype=np.float64)
        nested = parent >= 0
        np.add.at(children, parent[nested], dur[nested])
        time = np.maximum(dur - children, 0.0)          # self time
        # gloo's collectives: gloo:* ops, or any op on gloo's worker threads.
        gloo_name = np.array([str(n).startswith("gloo:") for n in ops["name"].categories] + [False], dtype=bool)
        comm = gloo_name[ops["name"].codes] | (ops["comm_kind"].astype(object) == "gloo")
        kind_code, kind_names = comm.astype(np.int64), ["cpu-op", "comm"]
    start = ops["start_ns"]
    at = np.searchsorted(lo, start, side="right") - 1
    inside = (at >= 0) & (start < hi[np.maximum(at, 0)]) & keep & (ops["name"].codes >= 0) & (kind_code >= 0)
    names = ops["name"]
    n_kinds = max(len(kind_names), 1)
    # One row per (name, kind): a name is one kind in every trace seen, but nothing makes it so.
    key = names.codes[inside].astype(np.int64) * n_kinds + kind_code[inside]
    if not key.size:
        return []
    size = len(names.categories) * n_kinds
    total = np.bincount(key, weights=time[inside], minlength=size)
    count = np.bincount(key, minlength=size)
    used = np.flatnonzero(count)
    best = used[np.argsort(-total[used], kind="stable")][:TOP]
    n = len(steps)
    return [(str(names.categories[k // n_kinds]), str(kind_names[k % n_kinds]), float(count[k]) / n,
             float(total[k]) / n) for k in best.tolist()]
