"""A Report in a notebook: what ``Report._repr_html_``, ``Report.figure`` and ``Report.to_pandas`` do.

The contract (``tracelens/contract/``) stays a data definition: its notebook methods name this module by
string and call it (docs/architecture.md, "A Report in a notebook"). Here it is drawn with the renderers' figures,
the dashboard's own (``renderers/figures.py``, ``across_ranks.py``, ``timeline_figure.py``,
``outlier_figure.py``), and a step's timeline is read through ``api.step_timeline`` from that rank's input file
alone; nothing is computed that the Report does not hold. plotly and pandas are imported on first use: a
report imports neither.
"""

from __future__ import annotations

import inspect
import operator
from typing import Iterable

import msgspec
import msgspec.inspect as mi

from . import api
from .arguments import ANYTHING, INTEGER, PATTERNS, TEXT, of_type, optional, takes
from .contract import Collective, Diagnosis, RankResult, Report, StepMetrics
from .errors import UsageError
from .renderers import across_ranks, figures, html, outlier_figure, timeline_figure
from .renderers.common import plural

NEEDED_BY = "drawing a Report's figures"
_OMITTED = object()          # an option not given (a timeline's step may be None: the whole-capture window)
_SENT = {"plotlyjs": False}  # whether this kernel already sent plotly.js to the notebook (once per notebook)


# ------------------------------------------------------------------------------------------------ the repr

def report_html(report: Report) -> str:
    """The Report as a notebook shows it: the verdict, the headline numbers, the budget and the heatmap. The
    first one of a kernel inlines plotly.js (no CDN: it opens offline); the later ones draw with it. Without
    plotly: the verdict and the numbers, and a line saying what to install for the figures."""
    footer = (f"report.figure(name) draws any view: {', '.join(VIEWS)}. "
              f"report.to_pandas(table) gives {', '.join(TABLES)}.")
    try:
        js = "" if _SENT["plotlyjs"] else html.plotly_js(NEEDED_BY)
    except UsageError as exc:
        return html.fragment(report, missing=str(exc), footer=footer)
    out = html.fragment(report, plotlyjs=js, footer=footer)
    _SENT["plotlyjs"] = True
    return out


def report_text(report: Report) -> str:
    """The Report as IPython prints it, one line: the Report's own repr holds every number of the run (a few
    hundred KB for a bundled sample, far more for a large run), which a notebook would store beside the HTML."""
    s = report.summary
    verdict = report.verdict.headline if report.verdict is not None else "no run verdict"
    return (f"<tracelens Report: {plural(s.ranks, 'rank', 'ranks')}, {plural(s.steps, 'step', 'steps')}, "
            f"{plural(len(report.diagnoses), 'finding', 'findings')}: {verdict}>")


# --------------------------------------------------------------------------------------------- the figures

def _needs_plotly() -> None:
    html.plotly_js(NEEDED_BY)       # UsageError naming the extra to install, before any figure is started


def _steps_list(steps: Iterable) -> str:
    return ", ".join("None (the whole capture)" if s is None else str(s) for s in steps) or "none"


_STEP = optional(INTEGER)        # a step's number; None: the whole capture's window


@takes("Report.figure('budget')", report=ANYTHING, step=_STEP, sort=TEXT)
def _budget(report: Report, step=None, sort: str = "rank"):
    """The rank time budget; ``step``: one step (None: every step), ``sort``: rank, exposed, compute or
    duration."""
    steps = figures.steps_of(report)
    if step is not None and step not in steps:
        raise UsageError(f"the report has no step {step!r}; its steps: {_steps_list(steps)}")
    if sort not in figures.SORTS:
        raise UsageError(f"unknown sort {sort!r}; choose one of {', '.join(figures.SORTS)}")
    return figures.budget(report, step, sort)


@takes("Report.figure('heatmap')", report=ANYTHING, metric=TEXT)
def _heatmap(report: Report, metric: str = "exposed_comm_fraction"):
    """The rank × step heatmap of one metric of the steps."""
    if metric not in figures.HEATMAP_METRICS:
        raise UsageError(f"unknown metric {metric!r}; choose one of {', '.join(figures.HEATMAP_METRICS)}")
    return figures.heatmap(report, metric, clickable=False)


@takes("Report.figure('timeline')", report=ANYTHING, rank=optional(INTEGER), step=_STEP, comm_patterns=PATTERNS,
       step_nvtx=optional(TEXT))
def _timeline(report: Report, rank: int | None = None, step=_OMITTED, comm_patterns: Iterable[str] = (),
              step_nvtx: str | None = None):
    """One rank's step: its lanes, the exposed stretches, each matched collective's wait apart from its
    transfer, the step's findings pinned. Read from that rank's input file (``comm_patterns`` and
    ``step_nvtx`` as the report was made with); ``step`` may be left out when the rank has one."""
    ranks = {r.rank: r for r in report.ranks}
    if rank not in ranks:
        raise UsageError(f"the timeline needs rank= one of the report's ranks: {', '.join(map(str, ranks))}")
    steps = [s.step for s in ranks[rank].steps]
    if step is _OMITTED and len(steps) == 1:
        step = steps[0]
    if step not in steps:
        raise UsageError(f"the timeline needs step= one of rank {rank}'s steps: {_steps_list(steps)}")
    tl = api.step_timeline(report, rank, step, comm_patterns=comm_patterns, step_nvtx=step_nvtx)
    return timeline_figure.timeline(tl, timeline_figure.step_findings(report, rank, step), report)


@takes("Report.figure('strip')", report=ANYTHING,
       step=_STEP | of_type("'all'", str, test=lambda value: value == "all"))
def _strip(report: Report, step=_OMITTED):
    """The collective strip on the aligned clock: one step (None: the whole-capture window), or "all"; left
    out, the first step, as the dashboard opens it."""
    steps = across_ranks.strip_steps(report)
    if steps is None:
        return None
    if step is _OMITTED:
        step = steps[0]
    if step != "all" and step not in steps:
        raise UsageError(f"no matched collectives in step {step!r}; the strip's steps: {_steps_list(steps)}, "
                         "or 'all'")
    return across_ranks.strip(report, step)


def _outliers(report: Report):
    """Each kind of collective with outliers: its instances' durations over the steps, the outliers marked."""
    return outlier_figure.outliers(report, clickable=False)


# name -> (the function that draws it from the Report and its options, what to show when the Report has none)
VIEWS = {
    "verdict": (figures.verdict_bar, "No run verdict with a cost per step in this report."),
    "budget": (_budget, ""),
    "heatmap": (_heatmap, ""),
    "dimensions": (figures.dimensions, "No communication attributed to a parallelism dimension."),
    "outliers": (_outliers, "No collective outliers in this report."),
    "timeline": (_timeline, ""),
    "wait_transfer": (across_ranks.wait_transfer, "No collectives matched across ranks (one rank, or none "
                                                  "matched): no wait for peers apart from transfer."),
    "strip": (_strip, "No matched collectives with their members' times: no collective strip."),
    "busbw": (across_ranks.busbw, "No matched collective with a size: no bus bandwidth."),
}


def figure(report: Report, name: str, **options):
    """The plotly figure of the dashboard's view ``name`` (``VIEWS``), drawn from the Report; where the Report
    has nothing for that view (a single rank's wait for peers), a figure that says so."""
    if name not in VIEWS:
        raise UsageError(f"no figure {name!r}; the figures: {', '.join(VIEWS)}")
    draw, why = VIEWS[name]
    accepted = list(inspect.signature(draw).parameters)[1:]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise UsageError(f"figure {name!r} takes {', '.join(accepted) or 'no options'}, not "
                         f"{', '.join(unknown)}")
    _needs_plotly()
    fig = draw(report, **options)
    return fig if fig is not None else figures.placeholder(why)


# ---------------------------------------------------------------------------------------------- the tables

def _columns(struct_type, prefix: str = "", optional: bool = False) -> list[tuple[str, tuple[str, ...], str]]:
    """(column, attribute path, dtype) of every field of a contract struct, as its JSON names it: a nested
    struct's fields become ``parent.field`` columns; a list or a dict stays one column of its JSON values
    (dtype ``json``). A field that may be null, or sits in a struct that may be, gets pandas' nullable dtype
    (an int stays exact)."""
    out = []
    for f in mi.type_info(struct_type).fields:
        kinds = f.type.types if isinstance(f.type, mi.UnionType) else (f.type,)
        nullable = optional or any(isinstance(k, mi.NoneType) for k in kinds)
        kind = next((k for k in kinds if not isinstance(k, mi.NoneType)), mi.AnyType())
        name = prefix + f.encode_name
        if isinstance(kind, mi.StructType):
            out += [(col, (f.name, *path), dtype) for col, path, dtype in _columns(kind.cls, name + ".", nullable)]
            continue
        dtype = {mi.IntType: "Int64" if nullable else "int64", mi.FloatType: "Float64" if nullable else "float64",
                 mi.BoolType: "boolean" if nullable else "bool", mi.StrType: "object"}.get(type(kind), "json")
        out.append((name, (f.name,), dtype))
    return out


def _values(rows: list, path: tuple[str, ...], dtype: str) -> list:
    """The column's value in each row: null inside a null struct; a list or a dict as its JSON value."""
    if len(path) == 1:                      # a million collectives: one attrgetter pass per column
        values = list(map(operator.attrgetter(path[0]), rows))
    else:
        values = []
        for obj in rows:
            for attr in path:
                obj = None if obj is None else getattr(obj, attr)
            values.append(obj)
    return [msgspec.to_builtins(v) for v in values] if dtype == "json" else values


def _frame(rows: list, struct_type, first: dict[str, list] | None = None, leave_out: tuple[str, ...] = ()):
    """One row per struct of ``rows``; ``first``: columns put before the struct's own."""
    import pandas as pd  # lazy: pandas, only for a notebook's tables (a report never imports it)

    data = {name: pd.Series(values, dtype="int64") for name, values in (first or {}).items()}
    for name, path, dtype in _columns(struct_type):
        if name not in leave_out:
            data[name] = pd.Series(_values(rows, path, dtype), dtype="object" if dtype == "json" else dtype)
    return pd.DataFrame(data, index=pd.RangeIndex(len(rows)))


def _steps(report: Report):
    rows = [(r.rank, s) for r in report.ranks for s in r.steps]
    return _frame([s for _, s in rows], StepMetrics, {"rank": [rank for rank, _ in rows]})


def _collectives(report: Report):
    return _frame(report.collectives, Collective)


def _findings(report: Report):
    return _frame(report.diagnoses, Diagnosis)


def _ranks(report: Report):
    return _frame(report.ranks, RankResult, leave_out=("steps",))


# name -> (the function, where in the JSON report its rows are)
TABLES = {
    "steps": (_steps, "ranks[].steps[], with the rank"),
    "collectives": (_collectives, "collectives[]"),
    "findings": (_findings, "diagnoses[]"),
    "ranks": (_ranks, "ranks[], without their steps"),
}


def table(report: Report, name: str):
    """One of ``TABLES`` as a pandas DataFrame: one row per entry of the JSON report, columns named as its
    fields."""
    if name not in TABLES:
        raise UsageError(f"no table {name!r}; the tables: {', '.join(TABLES)}")
    return TABLES[name][0](report)
