"""`tracelens report --format html` and `tracelens gate --html`: one self-contained file holding the Report's
numbers, with plotly.js inlined and nothing fetched from the network."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")

import tracelens  # noqa: E402
from tracelens.cli import main  # noqa: E402

from conftest import SAMPLES  # noqa: E402

SAMPLE = str(SAMPLES / "wfbp_100")


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "report.html"
    assert main(["report", SAMPLE, "--format", "html", "-o", str(out)]) == 0
    return out.read_text(encoding="utf-8")


def test_no_network_resource(page):
    # plotly.js is inlined: no <script src=...>, no stylesheet link, nothing loaded over http(s)
    assert not re.search(r"<script[^>]*\bsrc=", page)
    assert not re.search(r"<link[^>]*\bhref=\"?https?:", page)
    assert "Plotly.newPlot" in page and len(page) > 1_000_000     # the library itself is in the file


def test_holds_the_report_numbers(page):
    rep = tracelens.report(SAMPLE)
    # wfbp_100 truth (metrics.expected): 82.5 % overlap, 12.6 ms exposed over 2 ranks x 3 steps
    assert "<b>82.50 %</b>" in page and "<b>12.600 ms</b>" in page
    for d in rep.diagnoses:
        assert d.title in page
    top = max(rep.collectives, key=lambda c: c.exposed_ns)
    assert f"{top.exposed_ns * 1e-6:.6f}" in page
    assert "Rank time budget" in page and "per rank and step" in page
    assert "Collective strip on the aligned clock (step 2)" in page   # wfbp_100: 2 ranks matched from step 2


def test_html_is_the_same_for_a_saved_report(tmp_path, page):
    saved = tmp_path / "report.json"
    assert main(["report", SAMPLE, "--format", "json", "-o", str(saved)]) == 0
    again = tmp_path / "again.html"
    assert main(["report", str(saved), "--format", "html", "-o", str(again)]) == 0
    strip = lambda s: re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "ID", s)  # noqa: E731
    assert strip(again.read_text(encoding="utf-8")) == strip(page)


def test_gate_attaches_the_html(tmp_path, capsys):
    out = tmp_path / "gate.html"
    code = main(["gate", SAMPLE, "--min-overlap-pct", "90", "--no-config", "--html", str(out)])
    # wfbp_100 hides 82.5 % < 90 %: the gate fails, and the file is still written
    assert code == 1
    assert out.is_file() and "<b>82.50 %</b>" in out.read_text(encoding="utf-8")


def test_gate_html_without_plotly_says_how_to_install(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "plotly" else real(name, *a))
    code = main(["gate", SAMPLE, "--no-config", "--html", str(tmp_path / "g.html")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'tracelens-overlap[dashboard]'" in err and len(err.splitlines()) == 1
