"""The collective outliers view: each kind of collective with outliers (the Report's ``outliers``), its
instances' durations over the steps, the outliers marked by cause, its median and outlier limit drawn. A
point's customdata is [rank, step] (``"all"`` for a whole-capture step): the dashboard opens that timeline."""

from __future__ import annotations

from html import escape

from ..contract import OutlierKind, Report
from .common import size
from .figures import MS, PALETTE, plotly_go

MAX_KINDS = 6             # panels drawn; the findings list every kind
# "early" came early and waited as usual (no cost): the calm sky blue, apart from the usual instances' grey.
CAUSE_COLORS = {"wait": PALETTE["wait"], "transfer": PALETTE["transfer"], "early": PALETTE["comm"],
                "unknown": PALETTE["exposed"]}


def kind_title(k: OutlierKind) -> str:
    sizes = size(k.bytes_min) if k.bytes_min == k.bytes_max else f"{size(k.bytes_min)}-{size(k.bytes_max)}"
    group = f", group {k.pg}" if k.pg is not None else ""
    found = sum(c is not None for c in k.cause)
    return f"{k.op or 'collective'} of {sizes}{group}: {found} outlier(s) of {len(k.cause)}"


def points(k: OutlierKind) -> dict[str, dict]:
    """Per cause (``None``: not an outlier): the x (its step, else its place in order of start), the
    duration in ms, the hover text and the customdata [rank, step] of its instances."""
    by_step = all(s is not None for s in k.step)
    out: dict = {}
    for i, (rank, step, dur, cause) in enumerate(zip(k.rank, k.step, k.duration_ns, k.cause)):
        p = out.setdefault(cause, {"x": [], "y": [], "text": [], "customdata": []})
        p["x"].append(step if by_step else i)
        p["y"].append(dur * MS)
        where = f"rank {rank}" + ("" if step is None else f", step {step}")
        p["text"].append(escape(f"{where}: {dur * MS:.3f} ms" + ("" if cause is None else f" ({cause})")))
        p["customdata"].append([rank, "all" if step is None else step])
    return out


def outliers(report: Report, clickable: bool = True):
    """One panel per kind with outliers (at most MAX_KINDS); None when the run has none."""
    kinds = report.outliers[:MAX_KINDS]
    if not kinds:
        return None
    from plotly.subplots import make_subplots  # lazy: plotly, the optional ``dashboard`` extra

    go = plotly_go()
    fig = make_subplots(rows=len(kinds), cols=1, subplot_titles=[escape(kind_title(k)) for k in kinds],
                        vertical_spacing=0.12 / max(len(kinds) - 1, 1) if len(kinds) > 1 else 0.0)
    shown = set()
    for row, k in enumerate(kinds, start=1):
        for cause, p in points(k).items():
            name = "instance" if cause is None else f"outlier: {cause}"
            fig.add_trace(go.Scatter(
                x=p["x"], y=p["y"], mode="markers", name=name, legendgroup=name, showlegend=name not in shown,
                customdata=p["customdata"], hovertext=p["text"], hoverinfo="text",
                marker={"color": CAUSE_COLORS.get(cause, PALETTE["neutral"]),
                        "size": 6 if cause is None else 11, "symbol": "circle" if cause is None else "x",
                        "line": {"width": 0 if cause is None else 1, "color": PALETTE["ink"]}}), row=row, col=1)
            shown.add(name)
        fig.add_hline(y=k.median_ns * MS, line={"dash": "dot", "color": PALETTE["ink"], "width": 1}, row=row, col=1,
                      annotation_text="median", annotation_position="bottom right")
        fig.add_hline(y=k.limit_ns * MS, line={"dash": "dash", "color": PALETTE["exposed"], "width": 1}, row=row,
                      col=1, annotation_text="outlier limit", annotation_position="top right")
        by_step = all(s is not None for s in k.step)
        fig.update_xaxes(title_text="step" if by_step else "instance (in order of start)", row=row, col=1)
        fig.update_yaxes(title_text="duration (ms)", rangemode="tozero", row=row, col=1)
    click = " (click a point for its timeline)" if clickable else ""
    more = f"; {len(report.outliers) - len(kinds)} more kinds in the findings" if len(report.outliers) > len(kinds) else ""
    fig.update_layout(title={"text": f"Collective outliers: each instance's duration{click}{more}"},
                      height=max(320, 260 * len(kinds)), margin={"t": 80})
    return fig
