"""`tracelens dashboard` as a user runs it: the Report it serves, its defaults, and the one-line message
without the dashboard extra."""

from __future__ import annotations

import pytest

import tracelens
from tracelens.cli import main

from conftest import SAMPLES, running_dashboard

SAMPLE = str(SAMPLES / "wfbp_100")


def test_without_the_extra_it_says_how_to_install(monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "dash" else real(name, *a))
    code = main(["dashboard", SAMPLE])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "dash" in err and "pip install 'tracelens-overlap[dashboard]'" in err


def test_serves_the_same_report_as_tracelens_report(monkeypatch, capsys, tmp_path):
    pytest.importorskip("dash", reason="the dashboard extra (dash) is not installed")
    import tracelens.dashboards as dashboards

    served = {}
    monkeypatch.setattr(dashboards, "serve", lambda session, **kw: served.update(session=session, **kw))
    saved = tmp_path / "report.json"
    assert main(["report", SAMPLE, "--format", "json", "-o", str(saved)]) == 0
    assert main(["dashboard", SAMPLE, "--compare", str(saved), "--port", "8123"]) == 0
    runs = served["session"].runs
    assert [r.name for r in runs] == ["A", "B"]
    assert runs[0].report.to_json() == tracelens.report(SAMPLE).to_json() == runs[1].report.to_json()
    assert (served["host"], served["port"], served["open_browser"]) == ("127.0.0.1", 8123, False)


def test_a_port_in_use_is_one_line_and_exit_2(capsys):
    pytest.importorskip("dash", reason="the dashboard extra (dash) is not installed")
    import socket

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        # Before: the URL was printed, then the server's own two-line message and exit 1.
        code = main(["dashboard", SAMPLE, "--port", str(port)])
    out, err = capsys.readouterr()
    assert code == 2 and "http://" not in out
    assert err == f"tracelens: error: cannot listen on 127.0.0.1:{port}: is in use (choose another with --port)\n"


# ---------------------------------------------------------------------------------- untrusted requests

@pytest.fixture(scope="module")
def served():
    """The real `tracelens dashboard` on the sample; yields (its update URL, a function that stops it and gives
    its standard output and error)."""
    pytest.importorskip("dash", reason="the dashboard extra (dash) is not installed")
    import subprocess

    with running_dashboard(SAMPLE, stderr=subprocess.PIPE) as (proc, url):
        def stop() -> tuple[str, str]:
            proc.terminate()
            return proc.communicate(timeout=10)
        yield url + "_dash-update-component", stop


def _post(url: str, body, content_type: str = "application/json") -> tuple[int, bytes]:
    import json
    import urllib.error
    import urllib.request

    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as answer:
        return answer.code, answer.read()


def _call(output: str, outputs, inputs: list, state: list = (), changed=None) -> dict:
    """A callback request as the page sends it (dash-renderer's payload)."""
    body = {"output": output, "outputs": outputs,
            "inputs": [{"id": i, "property": p, "value": v} for i, p, v in inputs],
            "changedPropIds": changed if changed is not None else [f"{inputs[0][0]}.{inputs[0][1]}"]}
    if state:
        body["state"] = [{"id": i, "property": p, "value": v} for i, p, v in state]
    return body


def budget(run, step="all", sort="rank") -> dict:
    return _call("budget.figure", {"id": "budget", "property": "figure"},
                 [("run", "value", run), ("step", "value", step), ("sort", "value", sort)])


def timeline(click, run=0, via="heatmap") -> dict:
    clicked = {"heatmap": None, "outliers": None, via: click}
    return _call("..timeline.figure...timeline-info.children..",
                 [{"id": "timeline", "property": "figure"}, {"id": "timeline-info", "property": "children"}],
                 [("heatmap", "clickData", clicked["heatmap"]), ("findings", "cellClicked", None),
                  ("culprit-link", "n_clicks", 0), ("outliers", "clickData", clicked["outliers"])],
                 [("run", "value", run)], [f"{via}.clickData"])


def point(rank, step) -> dict:
    return {"points": [{"curveNumber": 0, "x": step, "y": rank, "z": 0.1}]}


# (name, body, content type, the status wanted). Before (issue 36) every one of the 4xx and 204 here was an
# HTTP 500 with a traceback in the server's log.
REFUSED = [
    ("null", b"null", "application/json", 400),
    ("empty list", b"[]", "application/json", 400),
    ("nested 100,000 deep", b"[" * 100_000 + b"]" * 100_000, "application/json", 400),
    ("not JSON", b"{'output':", "application/json", 400),
    ("not JSON by its type", b"{}", "text/plain", 415),
    ("no such callback", {"output": "nope.figure", "outputs": {"id": "nope", "property": "figure"}, "inputs": []},
     "application/json", 400),
    ("inputs not the callback's", {**budget(0), "inputs": [{"id": "../../etc/passwd", "property": "value"}]},
     "application/json", 400),
    ("50 MB", b'{"output": "' + b"a" * (50 << 20) + b'"}', "application/json", 413),
]
NO_UPDATE = [
    ("run index out of range", budget(1_000_000_000)),
    ("run as a path", budget("../../etc/passwd")),
    ("run as a float", budget(0.0)),
    ("step out of range", budget(0, 1_000_000_000)),
    ("step of the wrong type", budget(0, [3])),
    ("step as a path", budget(0, "/etc/passwd")),
]
SHOWN = [      # a click on nothing the heatmap has: a message in the timeline's place, or no update
    ("rank out of range", timeline(point(1_000_000_000, 3)), b"No timeline for rank 1000000000, step 3"),
    ("step out of range", timeline(point(1, 1_000_000_000)), b"No timeline for rank 1, step 1000000000"),
    ("run out of range", timeline(point(1, 3), 1_000_000_000), b"no run 1000000000"),
    ("rank as a path", timeline(point("../../etc/passwd", 3)), b'"response":{}'),
    # an outliers view point (its customdata is [rank, step])
    ("outlier rank out of range", timeline({"points": [{"customdata": [1_000_000_000, 3]}]}, via="outliers"),
     b"No timeline for rank 1000000000, step 3"),
    ("outlier rank as a path", timeline({"points": [{"customdata": ["../../etc/passwd", 3]}]}, via="outliers"),
     b'"response":{}'),
]


def test_the_real_server_refuses_malformed_requests_in_one_line_each(served):
    """The requests of issue 36 against a running `tracelens dashboard`: a 4xx for a body that is not a call of
    one of its callbacks, no update (204) for a value the page never sends, and never a 5xx; the server's log
    has one line per refused request and no traceback; it still answers a good request afterwards."""
    url, stop = served
    for name, body, kind, status in REFUSED:
        assert _post(url, body, kind)[0] == status, name
    for name, body in NO_UPDATE:
        assert _post(url, body) == (204, b""), name
    for name, body, said in SHOWN:
        status, answer = _post(url, body)
        assert status == 200 and said in answer, name
    status, answer = _post(url, budget(0, 3, "exposed"))
    assert status == 200 and b'"budget":{"figure"' in answer
    out, err = stop()
    lines = err.splitlines()
    assert "Traceback" not in out + err and len(lines) == len(REFUSED), err[-3000:]
    assert all(line.startswith("tracelens dashboard: refused POST /_dash-update-component from 127.0.0.1: 4")
               for line in lines)
    assert [line.split("127.0.0.1: ", 1)[1][:3] for line in lines] == [str(s) for *_, s in REFUSED]
