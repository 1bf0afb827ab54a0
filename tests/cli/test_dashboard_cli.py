"""`tracelens dashboard` as a user runs it: the Report it serves, its defaults, and the one-line message
without the dashboard extra."""

from __future__ import annotations

import pytest

import tracelens
from tracelens.cli import main

from conftest import SAMPLES

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
