"""Format-independent structure shared by all parsers: nesting, launch links and step membership.

These are relations between events, not metrics: who encloses whom on a host thread, which runtime call
launched a device activity (by correlation id), which ProfilerStep span contains that launch.
"""

from __future__ import annotations

import numpy as np

from .columns import distinct, isin, mask


def take(values: np.ndarray, idx: np.ndarray, default) -> np.ndarray:
    """values[idx] where idx >= 0, ``default`` elsewhere (works on an empty ``values``)."""
    out = np.full(idx.shape, default, dtype=values.dtype if values.size else np.int64)
    ok = idx >= 0
    out[ok] = values[idx[ok]]
    return out


# How far a child may outlive its parent and still be its child: timer rounding, not structure. Integer-µs
# traces truncate both a parent's start and its duration, so its end can read up to 2 µs early.
NEST_SLACK_NS = 2000


def host_parents(thread: np.ndarray, start: np.ndarray, end: np.ndarray, slack: int = NEST_SLACK_NS) -> np.ndarray:
    """Row of the innermost event enclosing each event on the same thread, -1 at top level.

    ``thread`` is any int64 key per event (e.g. factorized (pid, tid)). The result is defined by a stack
    walk over (thread, start, longest first): an event's parent is the latest-started event still open at
    its start that also lasts until its end, give or take ``slack`` ns (timer rounding); a zero-length
    event at the exact end of an event still counts as inside. An event that outlives every open event by
    more than that is not anyone's child: torch.profiler's ``ProfilerStep#N+1`` starts inside
    ``Optimizer.step`` when the schedule is stepped from an optimizer hook, and lasts a whole step longer
    (:func:`_parents_by_stack`).

    Threads whose events nest properly (the usual case) are solved with array operations; a thread
    with any partial overlap falls back to the stack walk, which defines the answer.
    """
    n = start.size
    parent = np.full(n, -1, dtype=np.int64)
    if n == 0:
        return parent
    order = _thread_start_order(thread, start, end)
    thr, st, en = thread[order], start[order], end[order]
    out = _parents_nested(st, en, thr)            # every thread at once, when all of them nest properly
    if out is None:
        bounds = np.flatnonzero(np.diff(thr)) + 1
        out = np.empty(n, dtype=np.int64)
        for a, b in zip(np.concatenate([[0], bounds]), np.concatenate([bounds, [n]])):
            local = _parents_nested(st[a:b], en[a:b])
            if local is None:
                local = _parents_by_stack(st[a:b], en[a:b], slack)
            out[a:b] = np.where(local >= 0, local + a, -1)
    # Translate positions in the sorted order back to original row numbers.
    parent[order] = np.where(out >= 0, order[np.maximum(out, 0)], -1)
    return parent


def _thread_start_order(thread: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``np.lexsort((-end, start, thread))``, in stable sorts that exploit what traces are: events nearly in
    start order, few threads, rare equal starts (several times faster than the lexsort)."""
    order = np.argsort(start, kind="stable")
    s = start[order]
    tie = np.flatnonzero(s[1:] == s[:-1])
    if tie.size:
        # Equal starts, longest first: re-sort only the events that share a start with a neighbour.
        rows = distinct(np.concatenate([tie, tie + 1]))
        sub = order[rows]
        order[rows] = sub[np.lexsort((-end[sub], start[sub]))]
    return order[np.argsort(thread[order], kind="stable")]


def _parents_nested(st: np.ndarray, en: np.ndarray, lane: np.ndarray | None = None) -> np.ndarray | None:
    """Stack-walk parents for events sorted by (start, -end) when they nest properly, else None.

    With proper nesting, an event's depth is the number of earlier events still open at its start, and
    its parent is the last earlier event one level up. Partial overlaps break that, and are detected by
    a child outliving its parent (the first offending event always does). With ``lane`` (events sorted by
    lane first), every lane is solved in the same array operations: times are ranked within their lane,
    after every earlier lane's, so an earlier lane's events are all closed when a lane begins.
    """
    n = st.size
    pos = np.arange(n, dtype=np.int64)
    width = n + 1
    lane_no = np.concatenate([[0], np.cumsum(lane[1:] != lane[:-1])]).astype(np.int64) \
        if lane is not None and n else np.zeros(n, np.int64)
    lanes = int(lane_no[-1]) + 1 if n else 1
    low = int(st.min()) if n else 0
    span = int(en.max()) - low + 1 if n else 1
    if lanes * span * width < 2**62:
        # Times relative to the first start keep the keys below in range (the usual case: seconds of capture).
        st_r, en_r = st - low, en - low
    else:                                     # else the times' ranks, which order the same way
        _, inv = np.unique(np.concatenate([st, en]), return_inverse=True)
        st_r, en_r = inv[:n].astype(np.int64), inv[n:].astype(np.int64)
        span = int(inv.max()) + 1
    if lane is not None and n:
        st_r, en_r = lane_no * span + st_r, lane_no * span + en_r
    ends = np.sort(en_r * width + pos, kind="stable")     # nearly sorted already: timsort's runs pay
    zero = en == st
    # Earlier events closed by this start: ends before it, or at it and listed earlier; a zero-length
    # event keeps open everything that ends exactly at its start.
    closed = np.searchsorted(ends, np.where(zero, st_r * width, st_r * width + pos), side="left")
    depth = pos - closed
    by_depth = np.sort(depth * width + pos, kind="stable")
    # Each event's key one level up, asked in by_depth order: the questions come sorted, which searchsorted
    # answers faster (each search starts from the last), and the answers go back to event order.
    idx = np.empty(n, dtype=np.int64)
    idx[by_depth % width] = np.searchsorted(by_depth, by_depth - width, side="left") - 1
    cand = by_depth[np.maximum(idx, 0)]
    par = np.where((depth > 0) & (idx >= 0) & (cand // width == depth - 1), cand % width, -1)
    has = par >= 0
    p = par[has]
    open_at_start = (en[p] > st[has]) | ((en[p] == st[has]) & zero[has])
    if (depth[~has] > 0).any() or not open_at_start.all() or (en[has] > en[p]).any():
        return None
    if lane is not None and n and (lane[p] != lane[has]).any():   # a broken lane borrowed another's event
        return None
    return par


def _parents_by_stack(st: np.ndarray, en: np.ndarray, slack: int = NEST_SLACK_NS) -> np.ndarray:
    """Reference stack walk over events of one thread sorted by (start, -end); positions, -1 at top level.

    After partial overlaps the stack is not nested any more, so the parent is searched for from the top:
    the first entry still open at the event's start that lasts until its end (within ``slack``).
    """
    n = st.size
    st_l, en_l = st.tolist(), en.tolist()
    out = [-1] * n
    stack_i: list[int] = []
    stack_end: list[int] = []
    for k in range(n):
        s, e = st_l[k], en_l[k]
        while stack_end and stack_end[-1] <= s and not (stack_end[-1] == s == e):
            stack_i.pop()
            stack_end.pop()
        j = len(stack_end) - 1
        while j >= 0 and (stack_end[j] + slack < e or (stack_end[j] <= s and not stack_end[j] == s == e)):
            j -= 1
        if j >= 0:
            out[k] = stack_i[j]
        stack_i.append(k)
        stack_end.append(e)
    return np.asarray(out, dtype=np.int64)


def link_by_correlation(device_corr: np.ndarray, launch_corr: np.ndarray, launch_rows: np.ndarray) -> np.ndarray:
    """For each device activity, the host row of the launch call with the same correlation id, else -1.

    When several launch calls share an id (should not happen within one process) the first wins.
    """
    out = np.full(device_corr.size, -1, dtype=np.int64)
    valid = launch_corr >= 0
    keys, rows = launch_corr[valid], launch_rows[valid]
    if keys.size == 0:
        return out
    order = np.argsort(keys, kind="stable")
    keys, rows = keys[order], rows[order]
    pos = np.searchsorted(keys, device_corr)
    pos_c = np.minimum(pos, keys.size - 1)
    hit = (device_corr >= 0) & (keys[pos_c] == device_corr)
    out[hit] = rows[pos_c[hit]]
    return out


# Host event categories of the runtime/driver calls that launch device work (matched by correlation id).
LAUNCH_CATS = ("cuda_runtime", "cuda_driver", "xpu_runtime", "privateuse1_runtime")


def launched_before_capture(device_corr: np.ndarray, launch_idx: np.ndarray, launch_corr: np.ndarray) -> np.ndarray:
    """Device activities launched before the capture began: no launch call in the trace, and a correlation
    id below every recorded launch's (``launch_corr``: the launch calls' ids). Ids grow with every launch,
    so these are work the CPU queued before recording started, not launches the trace lost."""
    recorded = launch_corr[launch_corr >= 0]
    if recorded.size == 0:
        return np.zeros(device_corr.size, dtype=bool)
    return (launch_idx < 0) & (device_corr >= 0) & (device_corr < recorded.min())


def step_of(times: np.ndarray, step_start: np.ndarray, step_end: np.ndarray, step_num: np.ndarray) -> np.ndarray:
    """Step number whose [start, end) host span contains each time, -1 if none (spans sorted by start)."""
    if step_start.size == 0:
        return np.full(times.size, -1, dtype=np.int64)
    i = np.searchsorted(step_start, times, side="right") - 1
    ic = np.maximum(i, 0)
    inside = (i >= 0) & (times < step_end[ic])
    return np.where(inside, step_num[ic], -1).astype(np.int64)


def nearest_ancestor(parent: np.ndarray, rows: np.ndarray, wanted: np.ndarray, include_self: bool = True,
                     max_depth: int = 256) -> np.ndarray:
    """For each row, the closest ancestor (optionally itself) whose ``wanted`` flag is set, else -1."""
    cur = rows.astype(np.int64).copy()
    if not include_self:
        cur = take(parent, cur, -1)
    found = np.full(cur.size, -1, dtype=np.int64)
    for _ in range(max_depth):
        live = (cur >= 0) & (found < 0)
        if not live.any():
            break
        hit = live & take(wanted, cur, False)
        found[hit] = cur[hit]
        cur = np.where(live & ~hit, take(parent, cur, -1), -1)
    return found


def main_thread(host) -> tuple[int, int] | None:
    """The (pid, tid) that ran the training loop: where ProfilerStep spans are, else the busiest cpu_op thread.

    ``host``: the host table, as a DataFrame or a dict of columns."""
    start, end = np.asarray(host["start_ns"]), np.asarray(host["end_ns"])
    if start.size == 0:
        return None
    cand = mask(host["name"], lambda n: n.startswith("ProfilerStep#"))
    if not cand.any():
        cand = isin(host["cat"], ("cpu_op",)) & (np.asarray(host["parent"]) < 0)
        if not cand.any():
            cand = np.ones(start.size, dtype=bool)
    threads, inv = np.unique(np.stack([np.asarray(host["pid"])[cand], np.asarray(host["tid"])[cand]], axis=1),
                             axis=0, return_inverse=True)
    busy = np.zeros(len(threads), dtype=np.int64)
    np.add.at(busy, inv.reshape(-1), (end - start)[cand])
    pid, tid = threads[np.argmax(busy)]                 # the first (lowest pid, tid) among equals
    return int(pid), int(tid)
