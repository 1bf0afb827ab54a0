"""Every output says the same run verdict: the text, Markdown, HTML and JSON renderings and the dashboard's
page agree on the headline, the culprit and the most exposed rank (no output computes its own)."""

from __future__ import annotations

import json
import re
from html import escape

import pytest

import tracelens
from tracelens.renderers import render

from conftest import SAMPLES
from fixtures import synth


def _components(node):
    """Every Dash component of a layout tree."""
    yield node
    children = getattr(node, "children", None)
    for child in children if isinstance(children, (list, tuple)) else [children]:
        if hasattr(child, "to_plotly_json"):
            yield from _components(child)


def _report(case, tmp_path):
    if case in synth.SCENARIOS:
        synth.write(synth.SCENARIOS[case], tmp_path)
        return tracelens.report(str(tmp_path))
    return tracelens.report(str(SAMPLES / case))


@pytest.mark.parametrize("case, culprit", [("straggler", 3), ("culprit_sync_stall", 5), ("wfbp_100", None)])
def test_the_outputs_agree(case, culprit, tmp_path):
    pytest.importorskip("dash")
    from tracelens.dashboards.app import Run, Session
    from tracelens.dashboards.layout import page

    rep = _report(case, tmp_path)
    headline, worst = rep.verdict.headline, rep.summary.worst_rank
    # The JSON holds them once; the culprit is the straggler finding's rank too.
    doc = json.loads(render(rep, "json"))
    assert doc["verdict"]["headline"] == headline and doc["summary"]["worst_rank"] == worst
    got = next((c["culprit"]["rank"] for c in doc["verdict"]["causes"] if c["culprit"]), None)
    assert got == culprit == next((d["rank"] for d in doc["diagnoses"] if d["id"] == "straggler"), None)
    # Text (wide enough for one line a sentence) and Markdown open with the headline.
    text = render(rep, "text", width=400)
    assert text.splitlines()[0] == f"verdict: {headline}"
    assert f"most exposed rank {worst}" in text
    md = render(rep, "markdown")
    assert md.splitlines()[2] == f"**{headline.replace('_', chr(92) + '_')}**"
    assert f"most exposed rank {worst}" in md
    html = render(rep, "html")
    assert f'<p class="verdict" id="verdict">{escape(headline)}</p>' in html
    assert html.index('id="verdict"') < html.index('class="headline"')
    assert re.search(rf"most exposed rank<b>{worst}</b>", html)
    if culprit is not None:
        for out in (text, md, html):
            assert f"waiting for rank {culprit}: " in out
    # The dashboard's first card is the verdict, and its culprit link names the same rank.
    layout = page(Session([Run("A", rep)]))
    ids = [c.id for c in _components(layout) if getattr(c, "id", None)]
    assert ids.index("verdict") < ids.index("headline")
    by_id = {c.id: c for c in _components(layout) if getattr(c, "id", None)}
    assert by_id["verdict-headline"].children == headline
    link = by_id["culprit-link"]
    assert (f"Open rank {culprit}'s timeline" in link.children) if culprit is not None else \
        link.style["display"] == "none"
    cards = {c.children[0].children: c.children[1].children for c in by_id["headline"].children}
    assert cards["most exposed rank"] == str(worst)
