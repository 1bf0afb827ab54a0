"""Views across ranks, from the Report's ``cross_rank`` and ``transport`` sections: wait versus transfer per rank,
the stragglers by arrival, bus bandwidth versus message size with the transport verdict. Each builder returns
None for a Report without the section (a single rank, or a report of a version before it), so callers show the
view only when there is something in it."""

from __future__ import annotations

from ..model.columns import distinct
from .figures import MAX_BARS, MS, PALETTE, SERIES, WORST, heading, plotly_go



def _cross(report):
    return getattr(report, "cross_rank", None)


def wait_rows(report) -> list[dict] | None:
    """Per rank: its wait for peers, its data transfer and its exposed wait (ns), arrivals last, matches."""
    cr = _cross(report)
    if cr is None:
        return None
    return [{"rank": r.rank, "host": r.host, "wait": r.wait_ns, "transfer": r.transfer_ns,
             "exposed_wait": r.exposed_wait_ns, "late_count": r.late_count, "matched": r.matched,
             "clock_offset_ns": r.clock_offset_ns} for r in sorted(cr.ranks, key=lambda r: r.rank)]


def straggler_rows(report) -> list[dict] | None:
    """The ranks by how often they arrived last at a matched collective, then by their wait (least first: the
    late rank waits least), in ms."""
    rows = wait_rows(report)
    if rows is None:
        return None
    ordered = sorted(rows, key=lambda r: (-r["late_count"], r["wait"], r["rank"]))
    return [{**r, "wait_ms": r["wait"] * MS, "transfer_ms": r["transfer"] * MS,
             "exposed_wait_ms": None if r["exposed_wait"] is None else r["exposed_wait"] * MS} for r in ordered]


def wait_transfer(report, max_bars: int = MAX_BARS):
    """Stacked bars per rank: time waiting for peers and time moving data in matched collectives (ms); past
    ``max_bars`` ranks, the ranks that waited most."""
    rows = wait_rows(report)
    if not rows:
        return None
    go = plotly_go()
    shown = rows if len(rows) <= max_bars else sorted(rows, key=lambda r: (-r["wait"], r["rank"]))[:WORST]
    labels = [str(r["rank"]) for r in shown]
    text = [f"rank {r['rank']} ({r['host'] or 'host unknown'})<br>wait {r['wait'] * MS:.6f} ms<br>transfer "
            f"{r['transfer'] * MS:.6f} ms<br>exposed wait "
            + ("unknown" if r["exposed_wait"] is None else f"{r['exposed_wait'] * MS:.6f} ms") + "<br>arrived last "
            f"{r['late_count']} of {r['matched']}" for r in shown]
    fig = go.Figure()
    for key, name, color in (("transfer", "transfer", PALETTE["transfer"]), ("wait", "wait for peers", PALETTE["wait"])):
        fig.add_trace(go.Bar(x=labels, y=[r[key] * MS for r in shown], name=name, marker_color=color,
                             hovertext=text, hovertemplate="%{hovertext}<extra>" + name + "</extra>"))
    # A rank known from NCCL Inspector logs alone has no exposed wait (unknown): no marker, never one at 0.
    fig.add_trace(go.Scatter(x=labels, y=[None if r["exposed_wait"] is None else r["exposed_wait"] * MS
                                          for r in shown], mode="markers",
                             name="exposed wait", marker={"color": PALETTE["exposed"], "symbol": "diamond", "size": 9},
                             hovertemplate="rank %{x}: exposed wait %{y:.6f} ms<extra></extra>"))
    title = "Wait for peers vs data transfer per rank" + ("" if len(shown) == len(rows) else
                                                          f" ({WORST} ranks that waited most)")
    fig.update_layout(barmode="stack", title=heading(title, "matched collectives, all steps"),
                      xaxis={"title": "rank", "type": "category", "categoryorder": "array", "categoryarray": labels},
                      yaxis={"title": "time (ms)"}, legend_orientation="h", legend_y=-0.2, margin={"t": 70})
    return fig


def transport_line(report) -> str | None:
    """The transport verdict in one line (with the measured inter-node bus bandwidth when there is one)."""
    t = getattr(report, "transport", None)
    if t is None:
        return None
    line = f"NCCL transport: {t.verdict} ({t.severity})"
    b = t.bandwidth
    if b is not None:
        line += (f"; inter-node busbw p50 {b.busbw_gbps_p50:.1f} GB/s over {b.collectives} collectives "
                 f"({b.range}: TCP up to {b.tcp_max_gbps:.0f}, RDMA from {b.rdma_min_gbps:.0f} GB/s)")
    return line


def busbw(report):
    """Bus bandwidth of every matched collective against its message size, one colour per op; the transport
    verdict in the title and, when measured, its TCP and RDMA limits as reference lines."""
    cr = _cross(report)
    if cr is None:
        return None
    points = [c for c in cr.collectives if c.busbw_gbps is not None and c.bytes]
    if not points:
        return None
    go = plotly_go()
    fig = go.Figure()
    ops = sorted({c.op or "unknown" for c in points})
    for n, op in enumerate(ops):
        mine = [c for c in points if (c.op or "unknown") == op]
        fig.add_trace(go.Scattergl(
            x=[c.bytes for c in mine], y=[c.busbw_gbps for c in mine], mode="markers", name=op,
            marker={"color": SERIES[n % len(SERIES)], "size": 7},
            customdata=[[c.pg or "", c.seq, c.step, len(c.ranks), c.transfer_ns * MS] for c in mine],
            hovertemplate=(op + " pg %{customdata[0]} seq %{customdata[1]} step %{customdata[2]}<br>"
                           "%{x:,} bytes, %{customdata[3]} ranks<br>transfer %{customdata[4]:.6f} ms<br>"
                           "busbw %{y:.3f} GB/s<extra></extra>")))
    t = getattr(report, "transport", None)
    if t is not None and t.bandwidth is not None:
        for y, name in ((t.bandwidth.tcp_max_gbps, "TCP max"), (t.bandwidth.rdma_min_gbps, "RDMA min")):
            fig.add_hline(y=y, line_dash="dash", line_color=PALETTE["ink"], annotation_text=f"{name} {y:.0f} GB/s")
    fig.update_layout(title=heading("Bus bandwidth vs message size", transport_line(report) or ""),
                      xaxis={"title": "message size (bytes)", "type": "log"}, yaxis={"title": "busbw (GB/s)"},
                      legend_orientation="h", legend_y=-0.2, margin={"t": 70})
    return fig


# ------------------------------------------------------------------------------------ the collective strip

MAX_STRIP_SHAPES = 50_000   # member parts drawn one by one up to this; past it, gaps under a pixel are merged
STRIP_PIXELS = 2_000        # the width the merge assumes: a gap shorter than span / STRIP_PIXELS is not seen


def _members(c) -> bool:
    """Whether the instance carries its members' times (a report of a version before them does not)."""
    return bool(getattr(c, "starts_ns", None))


def strip_steps(report) -> list | None:
    """The steps of the matched instances that carry member times (None first, as in ``steps_of``)."""
    cr = _cross(report)
    if cr is None or not any(_members(c) for c in cr.collectives):
        return None
    nums = {c.step for c in cr.collectives if _members(c)}
    return sorted(nums, key=lambda s: (s is not None, s if s is not None else 0))


def strip_columns(report, step="all") -> dict | None:
    """Per member of each matched instance of ``step`` ("all": every step), as numpy columns: ``instance`` (its
    index in ``cross_rank.collectives``), ``rank``, ``start`` and ``end`` on the aligned clock (the Report's
    ``starts_ns`` / ``ends_ns``), ``wait_end`` (end - the instance's transfer) and ``last`` (it was the
    instance's last rank). None without member times."""
    import numpy as np  # lazy: numpy, only for the strips; the dashboard's layout imports this module

    if strip_steps(report) is None:
        return None
    idx, ranks, starts, ends, transfer, last = [], [], [], [], [], []
    for n, c in enumerate(_cross(report).collectives):
        if not _members(c) or (step != "all" and c.step != step):
            continue
        k = len(c.ranks)
        idx.append(np.full(k, n, dtype=np.int64))
        ranks.append(c.ranks)
        starts.append(c.starts_ns)
        ends.append(c.ends_ns)
        transfer.append(np.full(k, c.transfer_ns, dtype=np.int64))
        last.append(np.full(k, -1 if c.last_rank is None else c.last_rank, dtype=np.int64))

    def cat(parts):
        return np.concatenate([np.asarray(p, dtype=np.int64) for p in parts]) if parts else np.empty(0, np.int64)
    cols = {"instance": cat(idx), "rank": cat(ranks), "start": cat(starts), "end": cat(ends)}
    cols["wait_end"] = cols["end"] - cat(transfer)
    cols["last"] = cols["rank"] == cat(last)
    return cols


def strip_rows(report, step="all") -> list[dict] | None:
    """The strip's members as dicts (``strip_columns``' names), with the instance's op, pg, seq and step."""
    cols = strip_columns(report, step)
    if cols is None:
        return None
    colls = _cross(report).collectives
    keys = ("instance", "rank", "start", "wait_end", "end", "last")
    rows = [dict(zip(keys, v)) for v in zip(*(cols[k].tolist() for k in keys))]
    for r in rows:
        c = colls[r["instance"]]
        r.update(op=c.op or "unknown", pg=c.pg, seq=c.seq, step=c.step)
    return rows


def _merge(rank, start, end, gap: int):
    """Parts (rank, start, end) of one kind joined, per rank, where the gap between them is under ``gap``; times
    relative to the first start shown (so a rank's place in the sort key cannot overflow)."""
    import numpy as np  # lazy: numpy, only for the strips; the dashboard's layout imports this module

    o = np.lexsort((start, rank))
    r, s, e = rank[o], start[o], end[o]
    if not len(r):
        return r, s, e
    # The running end of each rank's parts: rank order times (span + 1) keeps the running max within a rank.
    lane = np.cumsum(np.r_[0, r[1:] != r[:-1]])
    width = int(e.max()) + 1
    reach = np.maximum.accumulate(lane * width + e) - lane * width
    new = np.r_[True, (r[1:] != r[:-1]) | (s[1:] - reach[:-1] >= gap)]
    first = np.flatnonzero(new)
    return r[first], s[first], np.maximum.reduceat(e, first)


def strip(report, step="all", max_shapes: int = MAX_STRIP_SHAPES):
    """The collective strip on the aligned clock: one lane per rank, each matched instance from its start to its
    end, the wait (start to end - transfer) apart from the transfer, the last rank to arrive marked. One line
    trace per part kind, so any number of instances stays one drawing; past ``max_shapes`` parts, those closer
    than a pixel are merged. Times in ms from the earliest start shown."""
    import numpy as np  # lazy: numpy, only for the strips; the dashboard's layout imports this module

    cols = strip_columns(report, step)
    if cols is None:
        return None
    go = plotly_go()
    fig = go.Figure()
    where = "all steps" if step == "all" else f"step {step}"
    if not len(cols["rank"]):
        fig.update_layout(title={"text": f"Collective strip ({where}): no matched collective"})
        return fig
    t0 = int(cols["start"].min())
    span = int(cols["end"].max()) - t0
    merged = 2 * len(cols["rank"]) > max_shapes
    gap = span // STRIP_PIXELS if merged else 0
    colls = _cross(report).collectives
    for lo, hi, name, color in (("start", "wait_end", "wait for peers", PALETTE["wait"]),
                                ("wait_end", "end", "transfer", PALETTE["transfer"])):
        keep = cols[hi] > cols[lo]
        rank, a, b = cols["rank"][keep], cols[lo][keep] - t0, cols[hi][keep] - t0
        hover = None
        if merged:
            rank, a, b = _merge(rank, a, b, gap)
        else:
            text = []
            for n, r, x0, x1 in zip(cols["instance"][keep].tolist(), rank.tolist(), a.tolist(), b.tolist()):
                c = colls[n]
                text.append(f"rank {r} {c.op or 'unknown'} pg {c.pg} seq {c.seq} step {c.step}<br>{name} "
                            f"{(x1 - x0) * MS:.6f} ms")
            hover = [h for t in text for h in (t, t, None)]
        # Each part a line from its start to its end, then a gap (NaN) before the next one.
        xs = np.column_stack([a * MS, b * MS, np.full(len(a), np.nan)]).ravel()
        ys = np.column_stack([rank, rank, np.full(len(a), np.nan)]).ravel()
        # SVG while it is small (one path per kind either way); WebGL for the merged, large case.
        kind = go.Scattergl if merged else go.Scatter
        fig.add_trace(kind(x=xs, y=ys, mode="lines", name=name, line={"color": color, "width": 10},
                           hovertext=hover, hovertemplate=("%{hovertext}" if not merged else name + ", rank %{y}")
                           + "<br>at %{x:.6f} ms<extra></extra>", connectgaps=False))
    last = cols["last"]
    if last.any():
        inst = cols["instance"][last].tolist()
        fig.add_trace((go.Scattergl if merged else go.Scatter)(
            x=(cols["start"][last] - t0) * MS, y=cols["rank"][last], mode="markers", name="arrived last",
            marker={"color": PALETTE["exposed"], "symbol": "triangle-right", "size": 10},
            customdata=[[colls[n].op or "unknown", colls[n].seq] for n in inst],
            hovertemplate="rank %{y} arrived last at %{customdata[0]} seq %{customdata[1]}<br>at %{x:.6f} ms"
                          "<extra></extra>"))
    own = [r.rank for r in _cross(report).ranks if not r.clock_corrected]
    notes = [f"{len(distinct(cols['instance']))} matched instances"]
    if own:
        notes.append("on their own clock: rank " + ", ".join(map(str, sorted(own))))
    if merged:
        notes.append(f"gaps under {gap * MS:.6f} ms merged")
    few = len(distinct(cols["rank"])) <= MAX_BARS
    fig.update_layout(title=heading(f"Collective strip on the aligned clock ({where})", "; ".join(notes)),
                      xaxis={"title": "time since the first start shown (ms)"},
                      yaxis={"title": "rank", "autorange": "reversed", **({"dtick": 1} if few else {})},
                      legend_orientation="h", legend_y=-0.2, margin={"t": 70})
    return fig
