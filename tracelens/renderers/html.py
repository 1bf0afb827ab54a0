"""The Report as one self-contained HTML file: plotly.js inlined (no network, opens from disk), the run verdict
first (its headline, causes and levers, the causes as one bar), the headline numbers, the rank budget, the rank × step heatmap, wait vs transfer and busbw across ranks (when the Report
has them), the findings and the most exposed collectives. The figures
are the dashboard's (``figures``). ``fragment`` is a Report in a notebook cell (``Report._repr_html_``): the
verdict, the headline numbers, the budget and the heatmap, styled inside its own element."""

from __future__ import annotations

from html import escape

from ..contract import Report
from ..errors import UsageError
from . import across_ranks, figures, outlier_figure

INSTALL_HINT = "pip install 'tracelens-overlap[dashboard]'"
TOP_COLLECTIVES = 50

_RULES = f"""
table {{ border-collapse: collapse; font-size: 0.9em; margin-bottom: 1.5em; }}
th, td {{ border-bottom: 1px solid {figures.PALETTE["rule"]}; padding: 4px 8px; text-align: left; vertical-align: top; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
.headline {{ display: flex; flex-wrap: wrap; gap: 1em; margin-bottom: 1em; }}
.headline div {{ background: {figures.PALETTE["card"]}; padding: 0.5em 0.9em; border-radius: 4px; }}
.headline b {{ display: block; font-size: 1.3em; }}
.sev-critical {{ color: {figures.SEVERITY_COLORS["critical"]}; font-weight: bold; }}
.sev-warning {{ color: {figures.PALETTE["warning-ink"]}; }} .sev-info {{ color: {figures.PALETTE["ink"]}; }}
.verdict {{ font-size: 1.25em; font-weight: bold; }}
"""
_STYLE = ("\nbody { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1200px; color: "
          f"{figures.PALETTE['text']}; }}" + _RULES)
# A notebook cell's HTML sits inside the notebook's own page: its rules apply inside its own element only.
SCOPE = "tracelens-report"
_SCOPED = "\n".join(", ".join(f".{SCOPE} {sel.strip()}" for sel in rule.split("{")[0].split(",")) + " {"
                    + rule.split("{", 1)[1] + "}" for rule in _RULES.split("}") if "{" in rule)


def plotly_js(needed_by: str = "--format html") -> str:
    try:
        from plotly.offline import get_plotlyjs  # lazy: plotly, the optional ``dashboard`` extra
    except ImportError:
        raise UsageError(f"{needed_by} needs plotly: {INSTALL_HINT}") from None
    return get_plotlyjs()


def plots(figs, height: str = "520px") -> str:
    """The figures (None: not drawn) as HTML elements that draw with the page's plotly.js."""
    return "\n".join(f.to_html(full_html=False, include_plotlyjs=False, default_height=height,
                               config={"displaylogo": False}) for f in figs if f is not None)


def render(report: Report, *, top: int = TOP_COLLECTIVES) -> str:
    js = plotly_js()
    figs = [figures.verdict_bar(report), figures.budget(report), figures.heatmap(report, "exposed_comm_fraction", clickable=False),
            figures.dimensions(report), outlier_figure.outliers(report, clickable=False)]
    steps = across_ranks.strip_steps(report)       # the strip of the first step: a file has no step selector
    strip = across_ranks.strip(report, steps[0]) if steps else None
    figs += [f for f in (across_ranks.wait_transfer(report), strip, across_ranks.busbw(report)) if f is not None]
    return "".join([
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">",
        f"<title>tracelens report: {report.summary.ranks} ranks</title><style>{_STYLE}</style>",
        f"<script type=\"text/javascript\">{js}</script></head><body>",
        "<h1>tracelens: is communication hidden behind compute?</h1>",
        _verdict(report), _headline(report), _transport(report), plots(figs),
        "<h2>Findings</h2>", _findings(report),
        f"<h2>Most exposed collectives (top {top})</h2>", _collectives(report, top),
        f"<p><small>{escape(report.tool.name)} {escape(report.tool.version)}, schema {escape(report.schema)}; "
        f"inputs: {escape(', '.join(i.path for i in report.inputs))}</small></p>",
        "</body></html>\n"])


def fragment(report: Report, *, plotlyjs: str = "", missing: str = "", footer: str = "") -> str:
    """The report as a notebook cell shows it (``Report._repr_html_``): the run verdict, the headline numbers,
    the rank budget and the rank × step heatmap, styled inside its own element. ``plotlyjs``: the plotly.js to
    inline (a notebook's first report: the later ones draw with it); ``missing``: why there are no figures,
    said in their place; ``footer``: a last line."""
    figs = f"<p><i>{escape(missing)}</i></p>" if missing else plots(
        [figures.budget(report), figures.heatmap(report, "exposed_comm_fraction", clickable=False)], "460px")
    # As plotly's own notebook renderer loads it: MathJax left to the notebook.
    js = (f"<script type=\"text/javascript\">window.PlotlyConfig = {{MathJaxConfig: 'local'}};</script>"
          f"<script type=\"text/javascript\">{plotlyjs}</script>") if plotlyjs else ""
    return "".join([f"<div class=\"{SCOPE}\"><style>{_SCOPED}</style>", js, _verdict(report), _headline(report),
                    figs, f"<p><small>{escape(footer)}</small></p>" if footer else "", "</div>"])


def _verdict(report: Report) -> str:
    """The run's answer first: the headline, its causes with their cost, and what to try."""
    if report.verdict is None:
        return ""
    rows = figures.verdict_causes(report)
    table = _table(["cause", "ms per step", "of step", "ranks", "why"],
                   [[escape(r[k]) for k in ("cause", "ms per step", "of step", "ranks", "why")] for r in rows],
                   {1, 2}) if rows else ""
    levers = "".join(f"<li><i>Try ({escape(r['cause'])}):</i> {escape(r['lever'])}</li>" for r in rows if r["lever"])
    return (f"<p class=\"verdict\" id=\"verdict\">{escape(report.verdict.headline)}</p>{table}"
            + (f"<ul>{levers}</ul>" if levers else ""))


def _headline(report: Report) -> str:
    cells = "".join(f"<div>{escape(k)}<b>{escape(v)}</b></div>" for k, v in figures.headline(report))
    return f"<div class=\"headline\">{cells}</div>"


def _transport(report: Report) -> str:
    line = across_ranks.transport_line(report)
    return f"<p>{escape(line)}</p>" if line else ""


def _table(head: list[str], rows: list[list[str]], numeric: set[int] = frozenset()) -> str:
    th = "".join(f"<th>{escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(
        f"<td class=\"num\">{c}</td>" if i in numeric else f"<td>{c}</td>" for i, c in enumerate(r)) + "</tr>"
        for r in rows)
    return f"<table><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>"


def _findings(report: Report) -> str:
    rows = figures.findings_rows(report)
    if not rows:
        return "<p>No findings.</p>"
    return _table(["severity", "finding", "rank", "step", "verdict", "evidence", "advice"], [[
        f"<span class=\"sev-{escape(r['severity'])}\">{escape(r['severity'])}</span>", escape(r["id"]),
        str(r["rank"]), "all" if r["step"] is None else str(r["step"]), escape(r["title"]), escape(r["detail"]),
        escape(r["advice"])] for r in rows], {2, 3})


def _collectives(report: Report, top: int) -> str:
    rows = figures.collectives_rows(report, top)
    if not rows:
        return "<p>No collectives.</p>"
    return _table(["rank", "step", "op", "kernel", "bytes", "duration (ms)", "exposed (ms)"], [[
        str(r["rank"]), "" if r["step"] is None else str(r["step"]), escape(r["op"] or ""), escape(r["name"]),
        "" if r["bytes"] is None else str(r["bytes"]), f"{r['duration_ms']:.6f}", f"{r['exposed_ms']:.6f}"]
        for r in rows], {0, 1, 4, 5, 6})
