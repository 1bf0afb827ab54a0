"""The step timeline drill-down as a plotly figure: one row per lane, bars per activity kind, the exposed
stretches shaded, each matched collective's wait for peers apart from its transfer (two shades, from the
cross-rank match), and the findings of the step pinned where they happen. Times in ms from the step start."""

from __future__ import annotations

from html import escape

from ..contract import Diagnosis
from ..model.step_timeline import StepTimeline
from .figures import MS, PALETTE, SEVERITY_COLORS, opened_step, plotly_go

KIND_COLORS = {"compute": PALETTE["compute"], "comm": PALETTE["comm"], "memcpy": PALETTE["copy"],
               "memset": PALETTE["memset"], "sync": PALETTE["sync"]}
EXPOSED_LANE = "exposed comm"
PEER_LANE = "wait vs transfer"     # each matched collective's wait for peers apart from its transfer
PEER_COLORS = {"wait for peers": PALETTE["wait"], "transfer": PALETTE["transfer"]}
MAX_SHADES = 300          # more exposed stretches than this are shown by their lane only
HEIGHT = 420              # px, the figure without pinned findings (the dashboard's timeline was this tall)
TITLE_SPACE = 60          # px above the plot for the title
LABEL_FONT = 11           # px
LABEL_ROW = 18            # px a pinned finding's label takes: its line of LABEL_FONT text and padding
# A label runs from its pin toward the wider side of the plot, so it has at least half the plot: about 650 px
# on the dashboard's 1,400 px page, some 110 characters of 11 px text (6 px each); longer ones are cut.
LABEL_CHARS = 110


def timeline_bars(tl: StepTimeline) -> list[dict]:
    """One entry per (lane, kind): the lane, the kind and its intervals as ms offsets from the step start."""
    out = []
    for lane in [*tl.lanes]:
        for kind, (s, e) in lane.spans.items():
            out.append({"lane": lane.name, "kind": kind, "start_ms": ((s - tl.start_ns) * MS).tolist(),
                        "dur_ms": ((e - s) * MS).tolist(),
                        # plotly reads hover text as HTML: a kernel's template arguments must stay text
                        "names": [escape(n) for n in lane.names[kind]] if kind in lane.names else None})
    s, e = tl.exposed
    out.append({"lane": EXPOSED_LANE, "kind": "exposed", "start_ms": ((s - tl.start_ns) * MS).tolist(),
                "dur_ms": ((e - s) * MS).tolist(), "names": None})
    return out


def peer_bars(report, tl: StepTimeline) -> list[dict]:
    """The rank's matched collectives in the window, each split into its wait for the last rank ``[s, e - T)``
    and its transfer ``[e - T, e)`` (the Report's cross-rank match: member times on the aligned clock, moved back
    to the rank's own clock by its offset where it was applied); nothing without a cross-rank match."""
    cross = getattr(report, "cross_rank", None)
    if cross is None:
        return []
    me = next((r for r in cross.ranks if r.rank == tl.rank), None)
    back = me.clock_offset_ns if me is not None and me.clock_corrected and me.clock_offset_ns else 0
    parts: dict[str, tuple[list, list]] = {"wait for peers": ([], []), "transfer": ([], [])}
    for c in cross.collectives:
        if tl.rank not in c.ranks or c.starts_ns is None or c.ends_ns is None:
            continue
        i = c.ranks.index(tl.rank)
        s, e = c.starts_ns[i] + back, c.ends_ns[i] + back
        cut = e - c.transfer_ns
        for kind, a, b in (("wait for peers", s, cut), ("transfer", cut, e)):
            a, b = max(a, tl.start_ns), min(b, tl.end_ns)
            if b > a:
                parts[kind][0].append((a - tl.start_ns) * MS)
                parts[kind][1].append((b - a) * MS)
    return [{"lane": PEER_LANE, "kind": kind, "start_ms": starts, "dur_ms": durs, "names": None}
            for kind, (starts, durs) in parts.items() if starts]


def step_findings(report, rank: int, step) -> list[Diagnosis]:
    """The findings of one rank and step, pinned on its timeline: those of the step, and those of the rank as a
    whole whose click opens this step (where they cost most: ``opened_step``)."""
    return [d for d in report.diagnoses if d.rank == rank and (
        d.step == step or d.step is None and step is not None and opened_step(report, d) == (True, step))]


def pin_time(d: Diagnosis, tl: StepTimeline) -> int:
    """Where a finding happens in the step: the first timestamp its evidence names inside the window (a sync
    site, the end of the compute phase, the first collective), else the step start."""
    ev = d.evidence or {}
    candidates = [s.get("first_ns") for s in ev.get("sites", []) if isinstance(s, dict)]
    candidates += [ev.get(k) for k in ("first_ns", "compute_phase_end_ns", "first_comm_ns")]
    for t in candidates:
        if isinstance(t, int) and tl.start_ns <= t < tl.end_ns:
            return t
    return tl.start_ns


def timeline(tl: StepTimeline, findings: list[Diagnosis] = (), report=None):
    """``report``: the Report the timeline belongs to, for each matched collective's wait apart from its
    transfer (a lane of their own)."""
    go = plotly_go()
    fig = go.Figure()
    shown: set[str] = set()
    for bar in timeline_bars(tl) + (peer_bars(report, tl) if report is not None else []):
        color = PALETTE["exposed"] if bar["kind"] == "exposed" else \
            PEER_COLORS.get(bar["kind"]) or KIND_COLORS.get(bar["kind"], PALETTE["total"])
        fig.add_trace(go.Bar(
            y=[bar["lane"]] * len(bar["start_ms"]), x=bar["dur_ms"], base=bar["start_ms"], orientation="h",
            name=bar["kind"], marker_color=color, legendgroup=bar["kind"], showlegend=bar["kind"] not in shown,
            hovertext=bar["names"], hovertemplate=bar["lane"] + " " + bar["kind"] + (
                "<br>%{hovertext}" if bar["names"] else "") + "<br>start %{base:.6f} ms<br>length %{x:.6f} ms"
                "<extra></extra>"))
        shown.add(bar["kind"])
    s, e = tl.exposed
    if s.size <= MAX_SHADES:
        for a, b in zip(((s - tl.start_ns) * MS).tolist(), ((e - tl.start_ns) * MS).tolist()):
            fig.add_vrect(x0=a, x1=b, fillcolor=PALETTE["exposed"], opacity=0.12, line_width=0, layer="below")
    span = (tl.end_ns - tl.start_ns) * MS
    # Each finding's label on a row of its own above the plot, the earliest lowest: labels at the same time or
    # close together (three at the step start on the mfu_2gpu_before export) never cover each other.
    pins = sorted(((pin_time(d, tl) - tl.start_ns) * MS, n, d) for n, d in enumerate(findings))
    for row, (x, _, d) in enumerate(pins):
        fig.add_vline(x=x, line_color=SEVERITY_COLORS.get(d.severity, PALETTE["total"]), line_dash="dot")
        fig.add_annotation(x=x, y=1.0, yref="paper", yshift=row * LABEL_ROW, text=escape(label(d)),
                           showarrow=False, xanchor="left" if x < span / 2 else "right", yanchor="bottom",
                           font={"size": LABEL_FONT}, hovertext=escape(f"{d.title}: {d.detail}"))
    where = "all" if tl.step is None else tl.step
    note = f" (gaps under {tl.merged_below_ns * MS:.6f} ms merged)" if tl.merged_below_ns else ""
    top = TITLE_SPACE + len(pins) * LABEL_ROW
    fig.update_layout(barmode="overlay", title={"text": f"Rank {tl.rank}, step {where}: "
                                                        f"{(tl.end_ns - tl.start_ns) * MS:.3f} ms{note}",
                                                "yref": "container", "y": 1.0, "yanchor": "top", "pad": {"t": 12}},
                      xaxis={"title": "time since step start (ms)", "range": [0, (tl.end_ns - tl.start_ns) * MS]},
                      yaxis={"title": "lane", "type": "category", "autorange": "reversed"},
                      legend_orientation="h", legend_y=-0.25, margin={"t": top}, bargap=0.3,
                      # the plot keeps its height whatever the number of labels above it
                      height=HEIGHT + top - TITLE_SPACE)
    return fig


def label(d: Diagnosis) -> str:
    """A pinned finding's label: its id and title, cut at LABEL_CHARS (the whole of it on hover)."""
    text = f"{d.id}: {d.title}"
    return text if len(text) <= LABEL_CHARS else text[:LABEL_CHARS - 1] + "…"
