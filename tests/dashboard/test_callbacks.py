"""The dashboard's interactions as plain functions, its server settings, and that nothing from a request can
make it read a file it was not started with."""

from __future__ import annotations

import json
import logging

import pytest

pytest.importorskip("dash", reason="the dashboard extra (dash) is not installed")
pytest.importorskip("dash_ag_grid", reason="the dashboard extra (dash-ag-grid) is not installed")

import tracelens  # noqa: E402
from tracelens import api  # noqa: E402
from tracelens.dashboards import Run, Session, app as app_module, callbacks, create_app, guard  # noqa: E402

from conftest import SAMPLES  # noqa: E402

SAMPLE = str(SAMPLES / "wfbp_100")


@pytest.fixture(scope="module")
def session():
    return Session([Run("A", tracelens.report(SAMPLE))])


def click(rank, step):
    return {"points": [{"curveNumber": 0, "x": step, "y": rank, "z": 0.1}]}


def test_heatmap_click_gives_the_timeline_of_that_rank_and_step(session):
    picked = callbacks.selection_from_heatmap(click(1, 3))
    assert picked == (1, 3)
    fig, info = callbacks.timeline_view(session, 0, picked)
    st = next(s for s in session.runs[0].report.ranks[1].steps if s.step == 3)
    assert "Rank 1, step 3" in fig.layout.title.text and info.startswith("Rank 1, step 3")
    # the x axis spans the step's window from the Report, in ms
    assert fig.layout.xaxis.range[1] == pytest.approx(st.duration_ns * 1e-6)
    exposed = next(t for t in fig.data if t.name == "exposed")
    # wfbp_100 truth: 2.1 ms of the step's communication is exposed
    assert sum(exposed.x) == pytest.approx(2.1)
    lanes = {t.y[0] for t in fig.data if len(t.y)}
    assert {"stream 7", "stream 13", "exposed comm"} <= lanes


def test_a_finding_click_gives_its_rank_and_step(session):
    rows = callbacks.finding_rows(session, 0)
    row = next(r for r in rows if r["rank"] == 1)
    assert callbacks.selection_from_finding({"rowId": row["row_id"], "rowIndex": 0}) == (1, row["step"])
    fig, _ = callbacks.timeline_view(session, 0, (1, row["step"]))
    # the findings of that rank and step are pinned as annotations
    pinned = [d for d in session.runs[0].report.diagnoses if d.rank == 1 and d.step == row["step"]]
    assert len(fig.layout.annotations) == len(pinned) > 0


def test_budget_and_heatmap_callbacks_follow_the_controls(session):
    rep = session.runs[0].report
    fig = callbacks.budget_figure(session, 0, 3, "exposed")
    exposed = next(t for t in fig.data if t.name == "exposed comm")
    want = {str(r.rank): next(s for s in r.steps if s.step == 3).exposed_comm_ns * 1e-6 for r in rep.ranks}
    assert dict(zip(exposed.x, exposed.y)) == pytest.approx(want)
    hm = callbacks.heatmap_figure(session, 0, "overlap_pct").data[0]
    assert hm.z[0][0] == rep.ranks[0].steps[0].overlap_pct
    unknown = callbacks.heatmap_figure(session, 0, "<script>").data[0]      # falls back to the exposed fraction
    assert unknown.z[0][0] == rep.ranks[0].steps[0].exposed_comm_fraction


def test_findings_filter(session):
    assert callbacks.finding_rows(session, 0, ["critical"]) == []      # wfbp_100 has info findings only
    rows = callbacks.finding_rows(session, 0, ["info"], "rank")
    assert all("rank" in " ".join(map(str, r.values())).lower() for r in rows)


def test_strip_callback_draws_the_reports_member_times(session):
    rep = session.runs[0].report
    fig = callbacks.strip_figure(session, 0, 3)
    shown = [c for c in rep.cross_rank.collectives if c.step == 3]
    t0 = min(min(c.starts_ns) for c in shown)
    transfer = next(t for t in fig.data if t.name == "transfer")
    # wfbp_100: 2 ranks x 100 all-reduces in step 3, each member's transfer part ends at its end in the Report
    ends = sorted((r, (e - t0) * 1e-6) for c in shown for r, e in zip(c.ranks, c.ends_ns))
    got = sorted((y, x) for y, x in zip(transfer.y[1::3], transfer.x[1::3]))
    assert len(shown) == 100 and [g[0] for g in got] == [e[0] for e in ends]
    assert [g[1] for g in got] == pytest.approx([e[1] for e in ends])
    assert "step 3" in fig.layout.title.text
    assert callbacks.strip_figure(session, 0, "all").layout.title.text.startswith(
        "Collective strip on the aligned clock (all steps)")
    with pytest.raises(ValueError):
        callbacks.strip_figure(session, 0, "../etc")


def test_across_section_follows_the_run_selector(session):
    """--compare: run B's across-ranks section is drawn from run B's Report, and its heading names it."""
    b = tracelens.report(str(SAMPLES / "gloo_sawtooth"))
    two = Session([session.runs[0], Run("B", b)])
    heads = [callbacks.across_view(two, i)[0].children for i in (0, 1)]
    assert heads == ["Across ranks (run A)", "Across ranks (run B)"]
    strip = next(c for c in callbacks.across_view(two, 1) if getattr(c, "id", None) == "strip")
    # gloo_sawtooth: 24 all-reduces matched over 3 steps (8 a step), the first step shown first; wfbp_100 has
    # 100 a step
    assert "step 2" in strip.figure.layout.title.text and "8 matched instances" in strip.figure.layout.title.text
    assert "100 matched instances" in callbacks.strip_figure(two, 0, 2).layout.title.text


@pytest.mark.parametrize("bad", [
    click("../../../../etc/passwd", 3), click(1, "/etc/passwd"), {"points": []}, None, {"x": 1}])
def test_no_click_can_name_a_file(session, bad, monkeypatch):
    opened = []
    monkeypatch.setattr(api, "load", lambda paths, **kw: opened.append(paths))
    picked = callbacks.selection_from_heatmap(bad)
    assert picked is None
    assert opened == []


@pytest.mark.parametrize("run", ["../rank0.json.gz", -1, 5, 1.0, True, None])
def test_the_run_is_an_index_into_the_inputs(session, run, monkeypatch):
    opened = []
    monkeypatch.setattr(api, "load", lambda paths, **kw: opened.append(paths))
    fig, info = callbacks.timeline_view(session, run, (1, 3))
    assert info.startswith("No timeline") and opened == []


def test_a_request_reads_only_the_inputs(session, monkeypatch, tmp_path):
    """Through the HTTP endpoint: a crafted callback request with a path for the rank reads nothing; a valid
    one reads the rank's own input file and nothing else."""
    opened = []
    real = api.load
    monkeypatch.setattr(api, "load", lambda paths, **kw: opened.append([str(p) for p in paths]) or real(paths, **kw))
    server = create_app(Session(session.runs)).server.test_client()
    for rank, step in ((str(tmp_path / "secret"), 3), (1, 3)):
        body = {"output": "..timeline.figure...timeline-info.children..",
                "outputs": [{"id": "timeline", "property": "figure"}, {"id": "timeline-info", "property": "children"}],
                "inputs": [{"id": "heatmap", "property": "clickData", "value": click(rank, step)},
                           {"id": "findings", "property": "cellClicked", "value": None},
                           {"id": "culprit-link", "property": "n_clicks", "value": 0},
                           {"id": "outliers", "property": "clickData", "value": None}],
                "state": [{"id": "run", "property": "value", "value": 0}],
                "changedPropIds": ["heatmap.clickData"]}
        resp = server.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")
        assert resp.status_code in (200, 204)
    assert opened == [[session.runs[0].report.inputs[1].path]]


def test_server_defaults(monkeypatch, session, capsys):
    seen = {}
    monkeypatch.setattr("dash.Dash.run", lambda self, **kw: seen.update(kw))
    app_module.serve(session)
    assert seen["host"] == "127.0.0.1" and seen["port"] == 8050 and seen["debug"] is False
    assert seen["use_reloader"] is False
    out = capsys.readouterr()
    assert "http://127.0.0.1:8050/" in out.out and out.err == ""
    app_module.serve(session, host="0.0.0.0", port=9000)
    assert seen["host"] == "0.0.0.0" and "reachable from other machines" in capsys.readouterr().err


def test_assets_are_served_locally(session):
    app = create_app(session)
    assert app.config.serve_locally is True
    page = app.server.test_client().get("/").data.decode()
    assert "https://" not in page and "http://" not in page      # no CDN script or stylesheet


@pytest.fixture(scope="module")
def history_db(tmp_path_factory):
    from tracelens.cli import main

    db = tmp_path_factory.mktemp("hist") / "ci.db"
    for label, sample in (("main", "wfbp_100"), ("main", "one_bucket"), ("pr", "compute_bound_8")):
        assert main(["history", "add", str(SAMPLES / sample), "--db", str(db), "--label", label]) == 0
    return db


def test_history_view_shows_each_runs_summary(history_db, session):
    from tracelens.renderers import figures

    runs = api.history_runs(history_db)
    assert [r["label"] for r in runs] == ["main", "main", "pr"]          # oldest first, as added
    fig = figures.history(runs)
    main_overlap = next(t for t in fig.data if t.name == "main" and t.yaxis == "y")
    # the first two runs added: wfbp_100 (82.5 % hidden, metrics.expected) and one_bucket (nothing hidden)
    assert list(main_overlap.y) == [runs[0]["overlap_pct"], runs[1]["overlap_pct"]]
    assert main_overlap.y[0] == pytest.approx(82.5) and main_overlap.y[1] == pytest.approx(0.0)
    s = Session(session.runs, history=runs)
    info = callbacks.history_point(s, {"points": [{"customdata": [runs[2]["id"], "", runs[2]["source"]]}]})
    assert f"run {runs[2]['id']} (pr," in info and info.endswith(str(SAMPLES / "compute_bound_8"))
    bad = {"points": [{"customdata": ["../../etc/passwd"]}]}
    assert callbacks.history_point(s, bad) == "Click a point for its run."
    assert callbacks.history_point(s, {"points": [{"customdata": [999]}]}) == "No run 999 in the history."
    page = create_app(s).server.test_client().get("/_dash-layout").data.decode()
    assert '"id":"history"' in page.replace(" ", "")


def test_cli_reads_the_history(history_db, monkeypatch):
    import tracelens.dashboards as dashboards
    from tracelens.cli import main

    served = {}
    monkeypatch.setattr(dashboards, "serve", lambda s, **kw: served.update(session=s))
    assert main(["dashboard", SAMPLE, "--history", str(history_db), "--label", "pr"]) == 0
    assert [r["label"] for r in served["session"].history] == ["pr"]


def test_run_view_draws_that_runs_dimensions(session):
    (graph,) = callbacks.run_view(session, 0)[4]
    exposed = next(t for t in graph.figure.data if t.name == "exposed comm")
    # wfbp_100 truth: all its communication is DDP's (dp), 12.6 ms exposed over both ranks
    assert list(exposed.x) == ["dp"] and list(exposed.y) == pytest.approx([12.6])


# ------------------------------------------------------------------ values and requests the page never sends

@pytest.mark.parametrize("call", [
    lambda s: callbacks.budget_figure(s, 1_000_000_000, "all", "rank"),      # no such run
    lambda s: callbacks.budget_figure(s, "../rank0.json.gz", "all", "rank"),
    lambda s: callbacks.budget_figure(s, 0, 1_000_000_000, "rank"),          # wfbp_100 has steps 2, 3, 4
    lambda s: callbacks.budget_figure(s, 0, [3], "rank"),
    lambda s: callbacks.budget_figure(s, 0, 3.0, "rank"),
    lambda s: callbacks.budget_figure(s, 0, True, "rank"),
    lambda s: callbacks.heatmap_figure(s, -1, "overlap_pct"),
    lambda s: callbacks.finding_rows(s, 0, "critical"),                      # a string, not a list of them
    lambda s: callbacks.finding_rows(s, 0, [["info"]]),
    lambda s: callbacks.finding_rows(s, 0, ["../etc"]),
    lambda s: callbacks.finding_rows(s, 0, None, {"$ne": ""}),
    lambda s: callbacks.run_view(s, 1),
    lambda s: callbacks.across_view(s, None),
    lambda s: callbacks.strip_figure(s, 0, 1_000_000_000),
    lambda s: callbacks.strip_figure(s, 0, {"step": 3}),
])
def test_a_value_the_page_never_sends_is_invalid(session, call):
    with pytest.raises(guard.Invalid):
        call(session)


def test_the_values_the_page_sends_are_still_answered(session):
    # the selectors' own values: wfbp_100's steps 2, 3, 4, "all"; unknown sort and metric names fall back
    assert callbacks.budget_figure(session, 0, "all", ["rank"]).layout.title.text
    assert callbacks.heatmap_figure(session, 0, {"a": 1}).data[0].z[0][0] == \
        session.runs[0].report.ranks[0].steps[0].exposed_comm_fraction
    assert len(callbacks.finding_rows(session, 0, None, None)) == len(session.runs[0].report.diagnoses)
    assert callbacks.strip_figure(session, 0, "none").layout.title.text    # wfbp_100 has no whole-trace window


@pytest.mark.parametrize("bad", [
    click(float("inf"), 3), click(1, float("nan")), click(True, 3), click(1.5, 3), click("9" * 30, 3),
    click([1], 3), click(1, {"x": 3}), {"points": "abc"}, {"points": [None]}, "points", 7])
def test_a_click_on_nothing_is_no_selection(bad):
    assert callbacks.selection_from_heatmap(bad) is None


@pytest.mark.parametrize("row_id", ["inf|3|0", "1|nan|0", "True|3|0", "1.5|3|0", "9" * 30 + "|3|0", "1|3",
                                    "../etc|3|0", 7, None, ["1|3|0"], {"rank": 1}])
def test_a_click_on_no_finding_is_no_selection(row_id):
    assert callbacks.selection_from_finding({"rowId": row_id}) is None


def _update(server, body):
    return server.post("/_dash-update-component", data=json.dumps(body), content_type="application/json")


def _budget_call(run, step="all", sort="rank"):
    return {"output": "budget.figure", "outputs": {"id": "budget", "property": "figure"},
            "inputs": [{"id": "run", "property": "value", "value": run}, {"id": "step", "property": "value",
                                                                         "value": step},
                       {"id": "sort", "property": "value", "value": sort}], "changedPropIds": ["run.value"]}


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__()
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines():
    handler = _Lines()
    logging.getLogger("tracelens.dashboard").addHandler(handler)
    yield handler.lines
    logging.getLogger("tracelens.dashboard").removeHandler(handler)


def test_registered_callbacks_answer_an_invalid_value_with_no_update(session, log_lines):
    server = create_app(session).server.test_client()
    assert _update(server, _budget_call(0, 3)).status_code == 200
    for run, step in ((1_000_000_000, "all"), ("../x", "all"), (0, [3]), (0, 10**30)):
        answer = _update(server, _budget_call(run, step))
        assert (answer.status_code, answer.data) == (204, b"")
    assert log_lines == []          # not refused (a well-formed call), not a failure


def test_a_callback_that_fails_is_one_log_line_and_no_update(session, log_lines, monkeypatch):
    from tracelens.renderers import figures

    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    server = create_app(session).server.test_client()
    monkeypatch.setattr(figures, "budget", broken)
    answer = _update(server, _budget_call(0, 3))
    assert answer.status_code == 204
    assert log_lines == ["callback budget failed: RuntimeError: a bug"]


@pytest.mark.parametrize("change, why", [
    ({"outputs": {"id": "heatmap", "property": "figure"}}, "outputs are not the callback's"),
    ({"outputs": [{"id": "budget", "property": "figure"}] * 2}, "outputs are not the callback's"),
    ({"inputs": []}, "inputs are not the callback's"),
    ({"inputs": "run"}, "inputs are not the callback's"),
    ({"state": [{"id": "run", "property": "value", "value": 0}]}, "state are not the callback's"),
    ({"changedPropIds": ["timeline.figure"]}, "changedPropIds are not the callback's inputs"),
    ({"changedPropIds": "run.value"}, "changedPropIds are not the callback's inputs"),
    ({"output": ["budget.figure"]}, "no such callback"),
])
def test_a_body_that_is_not_a_call_of_a_callback_is_refused(session, log_lines, change, why):
    answer = _update(create_app(session).server.test_client(), {**_budget_call(0), **change})
    assert (answer.status_code, answer.data.decode()) == (400, why + "\n")
    assert len(log_lines) == 1 and log_lines[0].endswith(f": 400 {why}")


@pytest.mark.parametrize("text, depth", [
    (b"0", 0), (b"[]", 1), (b'{"a": [1, {"b": []}]}', 4), (b'["[[[[", "]]"]', 1), (b'"\\"[[["', 0),
    (b'[["\\\\"], []]', 2), (b"[" * 100_000 + b"]" * 100_000, 100_000)])
def test_the_depth_of_json_text_without_parsing_it(text, depth):
    # by hand: strings (with their escaped quotes and backslashes) hold no level
    assert guard.depth(text) == depth


def _outlier_report(tmp_path):
    """A generated run with one injected slow transfer (tests/integration/test_outliers.py: step 9, bucket 2
    of four ranks' 80 equal all-reduces)."""
    import dataclasses

    from fixtures import synth
    from fixtures.findings import write

    sc = dataclasses.replace(synth.OUTLIER_RUN, name="outliers_view", slow_transfer={(7, 2): 10_000_000})
    return tracelens.report(write(sc, tmp_path), cache=False)


def test_the_outliers_view_marks_the_outliers_and_a_click_opens_their_timeline(tmp_path):
    from tracelens.renderers import outlier_figure

    rep = _outlier_report(tmp_path)
    fig = outlier_figure.outliers(rep)
    traces = {t.name: t for t in fig.data}
    assert set(traces) == {"instance", "outlier: transfer"}
    hit = traces["outlier: transfer"]
    # The injected instance: step 9, 11 ms (1 ms + 10 ms), named by its longest member's rank.
    assert list(hit.x) == [9] and list(hit.y) == [pytest.approx(11.0)]
    assert len(traces["instance"].x) == 79 and all(y == pytest.approx(1.0) for y in traces["instance"].y)
    rank, step = hit.customdata[0]
    assert step == 9
    click = {"points": [{"curveNumber": 1, "x": 9, "y": 11.0, "customdata": [rank, step]}]}
    assert callbacks.selection_from_outlier(click) == (rank, 9)
    assert "1 outlier(s) of 80" in fig.layout.annotations[0].text


@pytest.mark.parametrize("bad", [None, {}, {"points": []}, {"points": [{"customdata": "x"}]},
                                 {"points": [{"customdata": [1]}]}, {"points": [{"customdata": ["a", 2]}]},
                                 {"points": [{"customdata": [2**70, 2]}]}])
def test_a_click_that_is_no_outlier_point_selects_nothing(bad):
    assert callbacks.selection_from_outlier(bad) is None


def test_a_run_without_outliers_says_so(session):
    from tracelens.dashboards import layout

    rep = session.runs[0].report
    assert rep.outliers == []
    assert layout.outliers_info(rep) == layout.NO_OUTLIERS and layout.outliers_style(rep)["display"] == "none"


def _timeline_call(run, click_=None):
    """A click on a heatmap cell (rank 1, step 3 of wfbp_100) with the run selector at ``run``."""
    inputs = [("heatmap", "clickData", click_ or click(1, 3)), ("findings", "cellClicked", None),
              ("culprit-link", "n_clicks", 0), ("outliers", "clickData", None)]
    return {"output": "..timeline.figure...timeline-info.children..",
            "outputs": [{"id": "timeline", "property": "figure"}, {"id": "timeline-info", "property": "children"}],
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
            "state": [{"id": "run", "property": "value", "value": run}], "changedPropIds": ["heatmap.clickData"]}


def test_every_value_of_every_callback_has_its_kind(session, history_db):
    app = create_app(Session(session.runs, history=api.history_runs(history_db)))     # with the history's callback
    given = {(i["id"], i["property"]) for cb in guard.served(app.callback_map).values()
             for i in [*cb["inputs"], *cb["state"]]}
    assert given == set(guard.VALUES)


def test_a_call_of_the_browsers_own_callback_is_refused(session, log_lines):
    """The timeline's scroll into view runs in the browser (a clientside callback, in the app's callback_map
    without a function): a request naming it is no call of the server's, refused with 400, where Dash raised
    KeyError ('Callback function not found') and answered 500."""
    app = create_app(session)
    assert "timeline-shown.data" in app.callback_map and "timeline-shown.data" not in guard.served(app.callback_map)
    body = {"output": "timeline-shown.data", "outputs": {"id": "timeline-shown", "property": "data"},
            "inputs": [{"id": "timeline-info", "property": "children", "value": "Rank 1, step 3"}],
            "changedPropIds": ["timeline-info.children"]}
    answer = _update(app.server.test_client(), body)
    assert (answer.status_code, answer.data) == (400, b"no such callback\n")


@pytest.mark.parametrize("run", [[0], {"0": 0}, "0", 0.0, True, None, -1])
def test_a_run_of_the_wrong_kind_is_no_update_before_any_callback_runs(session, log_lines, run):
    """Issue 49: a list where the run's index goes was answered 204, but the timeline callback had run and
    failed on it ('callback timeline failed: TypeError: unhashable type: 'list'' in the log)."""
    server = create_app(session).server.test_client()
    assert _update(server, _timeline_call(0)).status_code == 200
    answer = _update(server, _timeline_call(run))
    assert (answer.status_code, answer.data) == (204, b"")
    assert log_lines == []


# What the page sends for each input and state before anything is clicked (its own values).
_PAGE = {("run", "value"): 0, ("step", "value"): "all", ("sort", "value"): "rank", ("metric", "value"): "overlap_pct",
         ("severity", "value"): None, ("find-text", "value"): None, ("strip-step", "value"): "all",
         ("culprit-link", "n_clicks"): 0}


def _call_of(app, output: str, given: dict) -> dict:
    """A call of the callback ``output``, each value the page's own (``_PAGE``, else None) or ``given``'s."""
    cb = app.callback_map[output]
    outs = cb["output"] if isinstance(cb["output"], list) else [cb["output"]]
    value = lambda i: given.get((i["id"], i["property"]), _PAGE.get((i["id"], i["property"])))  # noqa: E731
    body = {"output": output, "outputs": [{"id": o.component_id, "property": o.component_property} for o in outs],
            "inputs": [{**i, "value": value(i)} for i in cb["inputs"]],
            "changedPropIds": [f"{i['id']}.{i['property']}" for i in cb["inputs"][:1]]}
    if len(outs) == 1:
        body["outputs"] = body["outputs"][0]
    if cb["state"]:
        body["state"] = [{**i, "value": value(i)} for i in cb["state"]]
    return body


@pytest.mark.parametrize("output, given, function", [
    ("budget.figure", {("step", "value"): [3]}, "budget_figure"),
    ("budget.figure", {("step", "value"): 3.0}, "budget_figure"),
    ("budget.figure", {("sort", "value"): ["rank"]}, "budget_figure"),
    ("heatmap.figure", {("metric", "value"): 7}, "heatmap_figure"),
    ("findings.rowData", {("severity", "value"): "info"}, "finding_rows"),
    ("findings.rowData", {("find-text", "value"): ["x"]}, "finding_rows"),
    ("strip.figure", {("strip-step", "value"): None}, "strip_figure"),
    ("..timeline.figure...timeline-info.children..", {("heatmap", "clickData"): ["x"]}, "timeline_view"),
    ("..timeline.figure...timeline-info.children..", {("culprit-link", "n_clicks"): "1"}, "timeline_view"),
], ids=["a list for the step", "a float step", "a list for the sort", "a number for the metric",
        "a str for the severities", "a list for the filter", "no strip step", "a list for a click",
        "clicks as text"])
def test_a_value_of_the_wrong_kind_never_reaches_its_callback(session, log_lines, monkeypatch, output, given,
                                                             function):
    app = create_app(session)
    server = app.server.test_client()
    assert _update(server, _call_of(app, output, {})).status_code in (200, 204)     # the page's own values
    ran = []
    monkeypatch.setattr(callbacks, function, lambda *args: ran.append(args))
    answer = _update(server, _call_of(app, output, given))
    assert (answer.status_code, answer.data, ran, log_lines) == (204, b"", [], [])


def test_the_timeline_of_a_run_that_is_no_index_says_so(session):
    # As for any run that is not there (test_the_run_is_an_index_into_the_inputs): the reason in its place.
    assert callbacks.timeline_view(session, [0], (1, 3))[1] == "No timeline for rank 1, step 3: no run [0]"
    with pytest.raises(guard.Invalid, match=r"^no run \[0\]$"):
        session.timeline([0], 1, 3)


# ------------------------------------------------------------------ issue 46: what a click opens, one wording

@pytest.fixture(scope="module")
def straggler():
    return Session([Run("A", tracelens.report(str(SAMPLES / "straggler")))])


def _finding_row(session, finding_id):
    return next(r for r in callbacks.finding_rows(session, 0) if r["id"] == finding_id)


def test_a_finding_of_a_rank_as_a_whole_opens_the_step_where_it_cost_most(straggler):
    """The straggler sample's straggler finding is rank 3's, of no step; rank 3 has steps 2-4 and cost the
    others 27.6 ms of wait in each (its evidence's caused_wait_by_step), so its click opens the first of them:
    step 2, the step the verdict's button opens. Before, the click asked for rank 3's step None and said
    'No timeline for rank 3, step None: the report has no rank 3 with step None'."""
    from tracelens.renderers import figures

    row = _finding_row(straggler, "straggler")
    assert (row["rank"], row["step"]) == (3, None)
    picked = callbacks.selection_from_finding({"rowId": row["row_id"]})
    assert picked == (3, 2) == figures.culprit_step(straggler.runs[0].report)
    fig, info = callbacks.timeline_view(straggler, 0, picked)
    assert info.startswith("Rank 3, step 2 ")
    # the finding clicked is pinned on the step it opened, beside the step's own (its sawtooth)
    assert sorted(a.text.split(":")[0] for a in fig.layout.annotations) == ["overlap-pattern", "straggler"]


def test_a_finding_that_names_no_step_says_why_nothing_opens(straggler):
    """The clocks-aligned finding is rank 0's, of no step, and names no step where it cost anything: rank 0's
    timeline is drawn step by step (2-4), so the click says so in words, with no 'step None'."""
    row = _finding_row(straggler, "clock-offset")
    fig, info = callbacks.timeline_view(straggler, 0, callbacks.selection_from_finding({"rowId": row["row_id"]}))
    assert info == ("No step to open for rank 0: this finding is about the rank as a whole and names no step "
                    "where it cost most. Click a heatmap cell of rank 0 (steps 2–4) to see one of its steps.")
    assert fig.layout.annotations[0].text == info


def test_an_unmeasured_overlap_tax_reads_the_same_on_the_card_and_in_the_verdict(straggler):
    """The straggler sample compared no kernel under communication with a run alone (summary
    overlap_tax_compared 0): the tax is unknown. The headline card said 'n/a' while the verdict's overlap-tax
    row said '0.000' ms and '0.0 %' of the step; now both say n/a, and the verdict bar draws no share for it."""
    from tracelens.dashboards import layout
    from tracelens.renderers import figures

    report = straggler.runs[0].report
    assert report.summary.overlap_tax_compared == 0
    card = dict(figures.headline(report))["overlap tax"]
    table = next(c for c in layout.verdict_children(report) if getattr(c, "children", None) and
                 type(c).__name__ == "Table")
    rows = [[td.children for td in tr.children] for tr in table.children[1].children]
    tax = next(r for r in rows if r[0] == "overlap-tax")
    assert card == "n/a" and tax[1:3] == ["n/a", "n/a"]
    assert "overlap-tax" not in {t.name for t in figures.verdict_bar(report).data}


def test_the_strip_selector_reads_as_words(straggler):
    """The collective strip's step selector was labelled 'collective strip, ' (a stray comma before the
    dropdown)."""
    from tracelens.dashboards import layout

    label = next(c for c in layout.across_children(straggler.runs[0].report) if type(c).__name__ == "Label")
    assert label.children[0] == "collective strip"
