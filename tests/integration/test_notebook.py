"""A Report in a notebook (tracelens/notebook.py): its HTML repr, ``report.figure`` for every dashboard view,
``report.to_pandas`` for its four tables, without plotly, and examples/quickstart.ipynb executed as a user runs
it (nbclient driving an ipykernel)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from html import escape

import pytest

import tracelens
from tracelens import api, notebook
from tracelens.errors import UsageError

from conftest import ROOT, SAMPLES

SAMPLE = SAMPLES / "straggler"          # 4 ranks, rank 3 1.3x slower: every cross-rank view has something
INSTALL = "pip install 'tracelens-overlap[dashboard]'"


@pytest.fixture(scope="module")
def rep():
    return tracelens.report(str(SAMPLE))


@pytest.fixture
def new_kernel(monkeypatch):
    """A kernel that has not sent plotly.js to its notebook yet."""
    monkeypatch.setitem(notebook._SENT, "plotlyjs", False)


def _plots(html: str) -> list[tuple[list, dict]]:
    """(data, layout) of every ``Plotly.newPlot`` call in ``html``."""
    decode = json.JSONDecoder().raw_decode
    out = []
    for m in re.finditer(r'Plotly\.newPlot\(\s*"[^"]+",\s*', html):
        data, end = decode(html, m.end())
        layout, _ = decode(html, end + re.match(r",\s*", html[end:]).end())
        out.append((data, layout))
    return out


# ------------------------------------------------------------------------------------------------ the repr

def test_the_repr_shows_the_verdict_the_numbers_the_budget_and_the_heatmap(rep, new_kernel):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
    from plotly.offline import get_plotlyjs

    from tracelens.renderers import figures

    first, second = rep._repr_html_(), rep._repr_html_()
    js = get_plotlyjs()
    # plotly.js once per notebook, inlined (no CDN): the first report sends it, the later ones draw with it.
    assert first.count(js) == 1 and js not in second and "cdn" not in first.replace(js, "").lower()
    assert len(second) < 100_000 < 4_000_000 < len(first)
    for out in (first, second):
        assert escape(rep.verdict.headline) in out
        for label, value in figures.headline(rep):
            assert f"<div>{escape(label)}<b>{escape(value)}</b></div>" in out
        (budget, budget_layout), (heat, heat_layout) = _plots(out)
        assert budget_layout["title"]["text"].startswith("Rank time budget (all steps)")
        assert heat_layout["title"]["text"] == "Exposed comm fraction per rank and step"    # nothing to click
        # The budget's bars are the Report's totals: exposed comm 15.6 ms on ranks 0-2 (5.2 ms in each of 3
        # steps) and 3.0 ms on rank 3 (sample_traces/straggler/metrics.expected, the generator's truth).
        exposed = next(t for t in budget if t["name"] == "exposed comm")
        assert exposed["x"] == ["0", "1", "2", "3"]
        assert exposed["y"] == [r.totals.exposed_comm_ns * 1e-6 for r in rep.ranks] == \
            pytest.approx([15.6, 15.6, 15.6, 3.0])
        assert heat[0]["type"] == "heatmap" and heat[0]["y"] == [0, 1, 2, 3] and heat[0]["x"] == [2, 3, 4]
        assert "report.figure(name) draws any view: verdict, budget, heatmap" in out


def test_ipython_prints_a_report_as_one_line(rep):
    # Its own repr holds every number (63 KB for this sample, 272 KB for wfbp_100's 600 collectives): a
    # notebook stores the plain text beside the HTML, so IPython's is one line. repr() itself is unchanged.
    from IPython.lib.pretty import pretty

    # 14 findings: an overlap pattern per rank and step (4 x 3), the clock offsets, the straggler (rank 3)
    assert pretty(rep) == f"<tracelens Report: 4 ranks, 3 steps, 14 findings: {rep.verdict.headline}>"
    assert repr(rep).startswith("Report(schema='tracelens.report/1'") and len(repr(rep)) > 50_000


def test_the_repr_styles_its_own_element_only(rep, new_kernel):
    # The notebook's page is not restyled: every rule of the repr's style is under its own element.
    out = rep._repr_html_()
    assert out.startswith('<div class="tracelens-report"><style>')
    style = out.split("<style>", 1)[1].split("</style>", 1)[0]
    selectors = [s.strip() for rule in style.split("}") if "{" in rule for s in rule.split("{")[0].split(",")]
    assert len(selectors) == 11 and all(s.startswith(".tracelens-report ") for s in selectors), selectors


def test_without_plotly_the_repr_says_what_to_install_and_the_tables_still_work(tmp_path):
    """The contract imports without the dashboard extra; the repr keeps the verdict and the numbers and says
    plainly that the figures need plotly; a figure is a usage error naming the extra."""
    code = (
        "import json, sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('dash', 'plotly', 'dash_ag_grid'):\n"
        "            raise ImportError(name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "import tracelens.contract\n"
        "from tracelens.errors import UsageError\n"
        f"rep = tracelens.report({str(SAMPLE)!r})\n"
        "out = {'html': rep._repr_html_(), 'rows': len(rep.to_pandas('steps'))}\n"
        "try:\n"
        "    rep.figure('budget')\n"
        "except UsageError as exc:\n"
        "    out['figure'] = str(exc)\n"
        "print(json.dumps(out))\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    rep = tracelens.report(str(SAMPLE))
    assert escape(rep.verdict.headline) in out["html"] and "<script" not in out["html"]
    assert f"<p><i>drawing a Report&#x27;s figures needs plotly: {escape(INSTALL)}</i></p>" in out["html"]
    assert out["figure"] == f"drawing a Report's figures needs plotly: {INSTALL}"
    assert out["rows"] == 12                # 4 ranks x steps 2-4


# --------------------------------------------------------------------------------------------- the figures

def test_every_dashboard_view_is_a_figure(rep):
    go = pytest.importorskip("plotly.graph_objects", reason="the dashboard extra (plotly) is not installed")
    titles = {}
    for name in notebook.VIEWS:
        options = {"rank": 0, "step": 3} if name == "timeline" else {}
        fig = rep.figure(name, **options)
        assert isinstance(fig, go.Figure), name
        titles[name] = fig.layout.title.text or ""
    assert titles["timeline"] == "Rank 0, step 3: 19.690 ms"       # the step's duration (generator truth)
    assert titles["strip"].startswith("Collective strip on the aligned clock (step 2)")   # the first, as the dashboard
    assert titles["budget"].startswith("Rank time budget (all steps)")
    assert rep.figure("budget", step=3, sort="exposed").layout.xaxis.categoryarray == ("0", "1", "2", "3")
    assert rep.figure("heatmap", metric="overlap_pct").layout.title.text == "Overlap per rank and step"
    assert rep.figure("strip", step="all").layout.title.text.startswith("Collective strip on the aligned clock (all")


def test_a_view_the_report_has_nothing_for_says_why():
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
    one = tracelens.report(str(SAMPLES / "cuda_nccl_ddp"))   # one rank: nothing matched across ranks
    for name in ("wait_transfer", "strip", "busbw", "outliers"):
        fig = one.figure(name)
        assert [a.text for a in fig.layout.annotations] == [notebook.VIEWS[name][1]], name
        assert not fig.data


def test_a_wrong_figure_or_option_is_a_usage_error(rep):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
    cases = [
        (("budgets",), {}, "no figure 'budgets'; the figures: verdict, budget, heatmap, dimensions, outliers, "
                           "timeline, wait_transfer, strip, busbw"),
        (("budget",), {"colour": "red"}, "figure 'budget' takes step, sort, not colour"),
        (("busbw",), {"step": 3}, "figure 'busbw' takes no options, not step"),
        (("budget",), {"step": 9}, "the report has no step 9; its steps: 2, 3, 4"),
        (("budget",), {"sort": "size"}, "unknown sort 'size'; choose one of rank, exposed, compute, duration"),
        (("heatmap",), {"metric": "busbw"}, "unknown metric 'busbw'; choose one of exposed_comm_fraction"),
        (("timeline",), {}, "the timeline needs rank= one of the report's ranks: 0, 1, 2, 3"),
        (("timeline",), {"rank": 1}, "the timeline needs step= one of rank 1's steps: 2, 3, 4"),
        (("timeline",), {"rank": 1, "step": None}, "the timeline needs step= one of rank 1's steps: 2, 3, 4"),
        (("strip",), {"step": 9}, "no matched collectives in step 9; the strip's steps: 2, 3, 4, or 'all'"),
    ]
    for args, options, message in cases:
        with pytest.raises(UsageError) as exc:
            rep.figure(*args, **options)
        assert str(exc.value).startswith(message), (args, options)


def test_a_timeline_reads_only_its_ranks_file(rep, monkeypatch):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
    seen = []
    real = api.load
    monkeypatch.setattr(api, "load", lambda paths, **kw: seen.append(list(paths)) or real(paths, **kw))
    fig = rep.figure("timeline", rank=2, step=4)
    assert [[p.name for p in paths] for paths in seen] == [["rank2.json.gz"]]
    assert fig.layout.title.text.startswith("Rank 2, step 4")


# ---------------------------------------------------------------------------------------------- the tables

def _at(row: dict, column: str):
    """The JSON value a column names: ``parent.field`` inside a nested object (null inside a null one)."""
    for part in column.split("."):
        row = None if row is None else row[part]
    return row


def _plain(value):
    """A cell as JSON has it: pandas' missing value as None."""
    import pandas as pd

    return None if not isinstance(value, (list, dict, str)) and pd.isna(value) else value


# straggler: every table has rows; gloo_sawtooth: a real recording, with its bucket model; cuda_nccl_ddp: one
# rank, work from before the capture (pre_capture), no collectives; nsys_wfbp_100: an Nsight Systems export.
@pytest.mark.parametrize("sample", ["straggler", "gloo_sawtooth", "cuda_nccl_ddp", "nsys_wfbp_100"])
def test_each_table_holds_the_reports_own_numbers_named_as_its_fields(sample, rep):
    """Every cell of every table equals the value at its column's name in the JSON report (exact: ints stay
    ints, nanosecond timestamps past 2**53 included), one row per entry, every field a column; an empty table
    has the columns too."""
    full, rep = rep, tracelens.report(str(SAMPLES / sample))
    doc = json.loads(rep.to_json())
    sources = {"steps": [{"rank": r["rank"], **s} for r in doc["ranks"] for s in r["steps"]],
               "collectives": doc["collectives"], "findings": doc["diagnoses"], "ranks": doc["ranks"]}
    assert set(sources) == set(notebook.TABLES)
    for table, rows in sources.items():
        frame = rep.to_pandas(table)
        assert len(frame) == len(rows), table
        assert list(frame.columns) == list(full.to_pandas(table).columns), table
        if not rows:
            continue
        fields = set(rows[0]) - ({"steps"} if table == "ranks" else set())
        assert {c.split(".")[0] for c in frame.columns} == fields, table
        for column in frame.columns:
            assert [_plain(v) for v in frame[column].tolist()] == [_at(r, column) for r in rows], (table, column)
    steps = rep.to_pandas("steps")
    assert str(steps["start_ns"].dtype) == "int64" and min(steps["start_ns"]) > 2**53
    assert str(steps["step"].dtype) == "Int64" and str(steps["overlap_pct"].dtype) == "Float64"


def test_an_unknown_table_is_a_usage_error(rep):
    with pytest.raises(UsageError, match="no table 'kernels'; the tables: steps, collectives, findings, ranks"):
        rep.to_pandas("kernels")


# ------------------------------------------------------------------------------------ the quickstart notebook

def test_the_quickstart_notebook_runs_and_shows_its_figures(tmp_path, monkeypatch):
    """examples/quickstart.ipynb as a user runs it: every cell in a fresh kernel, no error and nothing on
    stderr, the report's repr with plotly.js once, each figure as plotly's own mime bundle."""
    import nbformat
    from nbclient import NotebookClient

    # The kernel keeps its files (connection file, IPython's history) out of the user's home.
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    path = ROOT / "examples" / "quickstart.ipynb"
    nb = nbformat.read(path, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code")     # kept without outputs
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
                   ).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert [o for o in outputs if o.output_type == "error" or o.get("name") == "stderr"] == []
    rep = tracelens.report(str(SAMPLE))
    from plotly.offline import get_plotlyjs

    htmls = [o.data["text/html"] for o in outputs if "text/html" in o.get("data", {})]
    assert sum(h.count(get_plotlyjs()) for h in htmls) == 1
    shown = next(o.data for o in outputs if "tracelens-report" in o.get("data", {}).get("text/html", ""))
    assert escape(rep.verdict.headline) in shown["text/html"] and len(_plots(shown["text/html"])) == 2
    assert shown["text/plain"] == f"<tracelens Report: 4 ranks, 3 steps, 14 findings: {rep.verdict.headline}>"
    plots = [o.data["application/vnd.plotly.v1+json"] for o in outputs
             if "application/vnd.plotly.v1+json" in o.get("data", {})]
    assert [p["layout"]["title"]["text"].split("<br>")[0] for p in plots] == [
        "Rank time budget (step 3)", "Rank 0, step 3: 19.690 ms", "Wait for peers vs data transfer per rank"]
    # The tables: the steps of the 4 ranks (12 rows) and the one warning, the straggler finding on rank 3.
    tables = [h for h in htmls if "dataframe" in h]
    assert len(tables) == 3 and tables[0].count("<tr>") == 12       # body rows (the header's has a style)
    assert "straggler" in tables[2] and tables[2].count("<tr>") == 1
