"""The dashboard's callbacks under generated requests (issue 36): hypothesis writes callback requests whose
values are of every JSON type (null, booleans, integers up to 2^70, fractions, NaN and infinities, text, paths,
lists, objects, nested), and bodies of any other shape, and the app answers them in-process (Flask's test
client, with exceptions propagated: one that escapes fails the test with its traceback).

Each request must be answered with 200, 204 or a 4xx (400, 413, 415), never a 5xx; a well-formed call of a
callback never with a 4xx; no callback may fail (the registered callbacks' last line of defence logs a line
per failure: there must be none); and no file may be opened but the inputs the dashboard was started with
(the sample's two traces, copied beside a canary), its warm cache and Python's own files (imports).

Budget: a fixed, derandomized set of cases (like ``test_fuzz.py``'s seeded ones), about 14 s here. A third set keeps
every value the page's own but one (issue 49).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
from pathlib import Path

import pytest

pytest.importorskip("dash", reason="the dashboard extra (dash) is not installed")
pytest.importorskip("dash_ag_grid", reason="the dashboard extra (dash-ag-grid) is not installed")

from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import tracelens  # noqa: E402
from tracelens import api  # noqa: E402
from tracelens.cli import main  # noqa: E402
from tracelens.dashboards import Run, Session, create_app, guard  # noqa: E402

from conftest import ROOT, SAMPLES  # noqa: E402
from fixtures.opens import opened_files  # noqa: E402

CALLS = 300             # well-formed calls of the callbacks
BODIES = 150            # bodies of any shape
ONE_OFF = 150           # calls of the page's own values but one
UPDATE = "/_dash-update-component"
CASES = settings(derandomize=True, deadline=None, database=None, print_blob=True,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The dashboard over two runs (--compare) and a history, its inputs in a folder beside a canary."""
    top = tmp_path_factory.mktemp("dash")
    run = top / "run"
    shutil.copytree(SAMPLES / "wfbp_100", run)
    (top / "canary.json").write_text('{"traceEvents": []}')
    db = top / "history.db"
    assert main(["history", "add", str(run), "--db", str(db), "--label", "main"]) == 0
    report = tracelens.report(str(run))
    app = create_app(Session([Run("A", report), Run("B", report)], history=api.history_runs(db)))
    app.server.testing = True           # an exception in a view is raised here, not answered with a 500
    client = app.server.test_client()
    for rank, step in ((0, 2), (1, 4)):      # the first timeline imports its modules: before anything is recorded
        assert post(client, call(app, "..timeline.figure...timeline-info.children..",
                                 [{"points": [{"x": step, "y": rank}]}, None], [0]))[0] == 200
    log = Lines()
    logging.getLogger("tracelens.dashboard").addHandler(log)
    yield app, client, top, [i.path for i in report.inputs], log
    logging.getLogger("tracelens.dashboard").removeHandler(log)


def post(client, body, content_type="application/json"):
    data = body if isinstance(body, bytes) else json.dumps(body).encode()   # NaN, Infinity as Python writes them
    with opened_files() as opened:
        answer = client.post(UPDATE, data=data, content_type=content_type)
    return answer.status_code, answer.get_data(), opened


def call(app, output, inputs, state=(), changed=None) -> dict:
    """A call of the callback ``output`` with these input and state values, shaped as dash-renderer sends it."""
    cb = app.callback_map[output]
    outs = cb["output"] if isinstance(cb["output"], list) else [cb["output"]]
    outputs = [{"id": o.component_id, "property": o.component_property} for o in outs]
    body = {"output": output, "outputs": outputs if len(outputs) > 1 else outputs[0],
            # Inputs the test leaves out are sent as the page starts them (None; 0 clicks for a button).
            "inputs": [{**i, "value": inputs[k] if k < len(inputs) else (0 if i["property"] == "n_clicks" else None)}
                       for k, i in enumerate(cb["inputs"])],
            "changedPropIds": changed if changed is not None else [f"{i['id']}.{i['property']}" for i in
                                                                   cb["inputs"][:1]]}
    if cb["state"]:
        body["state"] = [{**s, "value": v} for s, v in zip(cb["state"], state)]
    return body


def _allowed(path: str, top: Path, inputs: list[str]) -> bool:
    """An input the dashboard was started with, a file of its warm cache, or one of Python's or the
    project's own (an import); never anything else in the folder that holds the inputs."""
    real = os.path.realpath(path)
    if real in {os.path.realpath(p) for p in inputs}:
        return True
    if real.startswith(os.path.realpath(top) + os.sep):
        return False
    roots = [sys.prefix, sys.base_prefix, str(ROOT), os.environ.get("TRACELENS_CACHE", "/nonexistent")]
    return any(real.startswith(os.path.realpath(r) + os.sep) for r in roots)


PATHS = ["../canary.json", "/etc/passwd", "canary.json", "run/rank0.json.gz", "rank0.json.gz", "..", "~",
         "file:///etc/passwd", "\x00", "1|3|0", "0|None|0", "all", "none", "rank", "exposed", "overlap_pct",
         "critical", "info", "warning", "1e400", "NaN", "-1", "3", "9" * 30]
NUMBERS = st.sampled_from([0, 1, 2, 3, 4, -1, 1_000_000_000, 2**31, 2**63, 2**70, 0.0, 1.0, 2.5, 1e300])
SCALARS = (st.none() | st.booleans() | st.integers() | NUMBERS | st.floats() | st.text(max_size=12)
           | st.sampled_from(PATHS))
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
    st.sampled_from(["points", "x", "y", "customdata", "rowId", "z", "a"]) | st.text(max_size=4), inner,
    max_size=4), max_leaves=10)
CLICKS = st.builds(lambda x, y, data: {"points": [{"x": x, "y": y, "customdata": data}]}, VALUES, VALUES, VALUES)
CELLS = st.builds(lambda rank, step, n: {"rowId": f"{rank}|{step}|{n}"}, VALUES, VALUES, VALUES)
ANY = VALUES | CLICKS | CELLS


@st.composite
def calls(draw, app):
    output = draw(st.sampled_from(sorted(guard.served(app.callback_map))))
    cb = app.callback_map[output]
    inputs = [draw(ANY) for _ in cb["inputs"]]
    state = [draw(ANY) for _ in cb["state"]]
    names = [f"{i['id']}.{i['property']}" for i in cb["inputs"]]
    changed = draw(st.lists(st.sampled_from(names), max_size=len(names), unique=True))
    return call(app, output, inputs, state, changed)


def _check(app_, status, opened, allowed_statuses):
    _, _, top, inputs, log = app_
    assert status in allowed_statuses
    assert [p for p in opened if not _allowed(p, top, inputs)] == []
    assert not [line for line in log.lines if "failed" in line], log.lines


def _fuzz(app, strategy, cases: int, statuses: tuple) -> None:
    """``cases`` requests drawn from ``strategy(dash app)``, each answered with one of ``statuses``."""
    @settings(CASES, max_examples=cases)
    @given(strategy(app[0]))
    def one(body):
        status, _, opened = post(app[1], body)
        _check(app, status, opened, statuses)
    one()


def test_generated_calls_of_every_callback(app):
    _fuzz(app, calls, CALLS, (200, 204))


# The page's own value of each input and state: a real cell, finding and run (wfbp_100: ranks 0-1, steps 2-4).
PAGE = {("run", "value"): 1, ("step", "value"): 3, ("sort", "value"): "exposed", ("metric", "value"): "overlap_pct",
        ("severity", "value"): ["info"], ("find-text", "value"): "rank", ("strip-step", "value"): 3,
        ("heatmap", "clickData"): {"points": [{"x": 3, "y": 1}]}, ("findings", "cellClicked"): {"rowId": "1|3|0"},
        ("culprit-link", "n_clicks"): 1, ("outliers", "clickData"): None, ("history", "clickData"): None}


@st.composite
def one_off(draw, app):
    """A call whose values are all the page's own but one, of any kind: what reaches a callback with everything
    else in order (a list for the run beside a real click once reached the timeline callback and failed there)."""
    output = draw(st.sampled_from(sorted(guard.served(app.callback_map))))
    cb = app.callback_map[output]
    slots = [(i["id"], i["property"]) for i in [*cb["inputs"], *cb["state"]]]
    odd = draw(st.sampled_from(slots))
    values = [draw(ANY) if slot == odd else PAGE[slot] for slot in slots]
    return call(app, output, values[:len(cb["inputs"])], values[len(cb["inputs"]):],
                [f"{i}.{p}" for i, p in slots[:len(cb["inputs"])] if (i, p) == odd] or None)


def test_generated_calls_with_one_value_off(app):
    _fuzz(app, one_off, ONE_OFF, (200, 204))


@st.composite
def bodies(draw, app):
    """Bodies of any shape: JSON of any type, or a call with one of its parts replaced or dropped."""
    if draw(st.booleans()):
        return draw(VALUES)
    body = draw(calls(app))
    key = draw(st.sampled_from(["output", "outputs", "inputs", "state", "changedPropIds", "extra"]))
    if draw(st.booleans()):
        body.pop(key, None)
    else:
        body[key] = draw(ANY)
    return body


def test_generated_bodies_of_any_shape(app):
    _fuzz(app, bodies, BODIES, (200, 204, 400))


def test_raw_bodies(app):
    """What no JSON encoder writes: not JSON, nested past the limit, too large, of another type."""
    client = app[1]
    for data, kind, status in [(b"{", "application/json", 400), (b"\xff\xfe", "application/json", 400),
                               (b"[" * 33 + b"]" * 33, "application/json", 400),
                               (b"[" * 32 + b"]" * 32, "application/json", 400),         # deep enough, not a call
                               (b'["' + b"[" * 100 + b'"]', "application/json", 400),   # brackets in a string
                               (b"{}", "text/plain", 415), (b" " * (1 << 20 | 1), "application/json", 413)]:
        got, _, opened = post(client, data, kind)
        _check(app, got, opened, (status,))
