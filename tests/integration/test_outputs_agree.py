"""Every output says the same run verdict: the text, Markdown, HTML and JSON renderings and the dashboard's
page agree on the headline, the culprit and the most exposed rank (no output computes its own). And every view
of one rank's step (the notebook's figures, the dashboard's; ``STEP_VIEWS``) shows the same numbers, the
Report's."""

from __future__ import annotations

import json
import re
from html import escape

import pytest

import tracelens
from tracelens.renderers import render

from conftest import SAMPLES
from fixtures import synth
from fixtures import dash_tree


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
    ids = [c.id for c in dash_tree.components(layout) if getattr(c, "id", None)]
    assert ids.index("verdict") < ids.index("headline")
    by_id = dash_tree.by_id(layout)
    assert by_id["verdict-headline"].children == headline
    link = by_id["culprit-link"]
    assert (f"Open rank {culprit}'s timeline" in link.children) if culprit is not None else \
        link.style["display"] == "none"
    cards = {c.children[0].children: c.children[1].children for c in by_id["headline"].children}
    assert cards["most exposed rank"] == str(worst)


@pytest.mark.parametrize("fmt", ["text", "markdown", "json", "html"])
def test_every_output_opens_with_the_answer(fmt, tmp_path):
    # README, "The run verdict": every output opens with the run's answer, the verdict's headline (the
    # straggler sample: rank 3 late by generator truth, so a verdict with causes and a culprit).
    rep = _report("straggler", tmp_path)
    headline = rep.verdict.headline
    if fmt == "html":
        pytest.importorskip("plotly")
    out = render(rep, fmt) if fmt != "text" else render(rep, "text", width=400)
    if fmt == "text":
        assert out.splitlines()[0] == f"verdict: {headline}"
    elif fmt == "markdown":
        assert out.splitlines()[:3] == ["# tracelens overlap report", "", f"**{headline}**"]
    elif fmt == "html":
        body = out.split("<body>", 1)[1]
        assert re.match(rf'<h1>[^<]*</h1><p class="verdict" id="verdict">{re.escape(escape(headline))}</p>', body)
    else:
        # The schema's tag first (how a reader knows a saved report from a trace), then the answer.
        doc = json.loads(out)
        assert list(doc)[:2] == ["schema", "verdict"] and doc["verdict"]["headline"] == headline
        assert out.index(json.dumps(headline, ensure_ascii=False)) < out.index('"tool"')
        # Read back as it was written, and still known for a saved report by its first bytes.
        from tracelens.contract import Report, is_report_file, read_report
        from tracelens.parsers import sniff_json

        path = tmp_path / "report.json"
        path.write_text(out, encoding="utf-8")
        assert is_report_file(path) and sniff_json(path) == "a saved tracelens report"
        assert read_report(path) == rep == Report.from_json(out)


# ------------------------------------------------------------------ one rank and step in every view of it
#
# Each view that shows a rank's step gives what it shows of it as one record, in integer ns: ``budget`` (the
# budget bar's segments, by legend name), ``exposed_comm_fraction`` and ``overlap_pct`` (the heatmap's cell),
# and, as (start, length) from the step start, ``exposed`` (the exposed stretches), ``wait for peers`` and
# ``transfer`` (each matched collective's parts). A view gives the keys it shows; the test holds every key two
# views share to one value, and every key to the Report's own number.

INTERVALS = {"exposed": "exposed_comm_ns", "wait for peers": "wait_ns", "transfer": "transfer_ns"}


def _ns(ms: float) -> int:
    return round(ms * 1e6)


def budget_record(fig, rank: int) -> dict:
    """The budget figure's bar of ``rank``: each segment's length."""
    bars = [t for t in fig.data if t.type == "bar"]
    return {"budget": {t.name: _ns(t.y[list(t.x).index(str(rank))]) for t in bars}}


def heatmap_record(fig, rank: int, step) -> dict:
    """The heatmap's cell of ``rank`` and ``step`` (its metric named by the figure's title)."""
    cell = fig.data[0]
    value = float(cell.z[list(cell.y).index(rank)][list(cell.x).index("all" if step is None else step)])
    return {"overlap_pct" if fig.layout.title.text.startswith("Overlap") else "exposed_comm_fraction": value}


def timeline_record(fig) -> dict:
    """The timeline figure's exposed stretches and each matched collective's wait and transfer."""
    from tracelens.renderers.timeline_figure import EXPOSED_LANE, PEER_LANE

    out: dict = {}
    for t in fig.data:
        if t.name in INTERVALS and t.y and t.y[0] in (EXPOSED_LANE, PEER_LANE):
            out[t.name] = sorted((_ns(b), _ns(d)) for b, d in zip(t.base, t.x))
    return out


def notebook_record(rep, rank: int, step) -> dict:
    return {**budget_record(rep.figure("budget", step=step), rank),
            **heatmap_record(rep.figure("heatmap", metric="exposed_comm_fraction"), rank, step),
            **heatmap_record(rep.figure("heatmap", metric="overlap_pct"), rank, step),
            **timeline_record(rep.figure("timeline", rank=rank, step=step))}


def dashboard_record(rep, rank: int, step) -> dict:
    """As the dashboard's callbacks draw them for the step chosen and the cell clicked."""
    from tracelens.dashboards import callbacks
    from tracelens.dashboards.app import Run, Session

    session = Session([Run("A", rep)])
    return {**budget_record(callbacks.budget_figure(session, 0, step, "rank"), rank),
            **heatmap_record(callbacks.heatmap_figure(session, 0, "exposed_comm_fraction"), rank, step),
            **heatmap_record(callbacks.heatmap_figure(session, 0, "overlap_pct"), rank, step),
            **timeline_record(callbacks.timeline_view(session, 0, (rank, step))[0])}


def annotated_record(rep, rank: int, step) -> dict:
    """As `tracelens annotate` writes the rank's trace (its input's folder annotated into a temporary one): the
    step's added slices (exposed communication; each matched collective's wait for peers and transfer, by
    their step) as offsets from the step's start and lengths, and the counters at the step's start."""
    import gzip
    import tempfile
    from decimal import Decimal
    from pathlib import Path

    from tracelens import api
    from tracelens.model.annotation import CATEGORY

    source = Path(next(i.path for i in rep.inputs if i.rank == rank and i.rank_rule != "manifest"))
    written = api.annotate(source.parent, tempfile.mkdtemp())
    path = next(p for p in written if p.name.startswith(f"rank{rank}."))
    with (gzip.open(path, "rt") if path.suffix == ".gz" else open(path)) as fh:
        doc = json.load(fh, parse_float=Decimal)
    base = doc.get("baseTimeNanoseconds") or 0
    added = [e for e in doc["traceEvents"] if e.get("cat") == CATEGORY]
    tracks = {e["tid"]: e["args"]["name"].split(" (")[0] for e in added
              if e["ph"] == "M" and e["name"] == "thread_name"}
    m = next(s for r in rep.ranks if r.rank == rank for s in r.steps if s.step == step)
    at = lambda e: int(e["ts"] * 1000) + base        # noqa: E731 - on the Report's clock, in ns
    out: dict = {}
    for e in added:
        track = {"exposed communication": "exposed"}.get(tracks.get(e["tid"], ""), tracks.get(e["tid"]))
        if e["ph"] == "X" and track in INTERVALS and e["args"].get("step") == step:
            out.setdefault(track, []).append((at(e) - m.start_ns, int(e["dur"] * 1000)))
        elif e["ph"] == "C" and at(e) == m.start_ns:
            key, field = {"overlap": ("%", "overlap_pct"), "exposed": ("fraction", "exposed_comm_fraction")}[e["name"]]
            out[field] = float(e["args"][key])
    return {k: sorted(v) if k in INTERVALS else v for k, v in out.items()}


# Every view of a rank's step: a function of (Report, rank, step) giving its record. A new view joins here.
STEP_VIEWS = {"notebook": notebook_record, "dashboard": dashboard_record, "annotated": annotated_record}


def report_record(rep, rank: int, step) -> dict:
    """What the Report itself says of the step: the budget's segments from its fields (figures.budget_rows'
    sums), the ratios, and each interval kind's total."""
    m = next(s for r in rep.ranks if r.rank == rank for s in r.steps if s.step == step)
    return {"budget": {"compute only": m.compute_ns - m.overlap_ns, "overlapped comm": m.overlap_ns,
                       "exposed comm": m.exposed_comm_ns, "idle": m.idle_ns,
                       "copy only": m.duration_ns - m.compute_ns - m.exposed_comm_ns - m.idle_ns},
            "exposed_comm_fraction": m.exposed_comm_fraction, "overlap_pct": m.overlap_pct,
            **{kind: getattr(m, field) or 0 for kind, field in INTERVALS.items()}}


def assert_views_agree(rep, rank: int, step) -> dict:
    """Every view's record of the step, checked: a key two views show has one value, and each is the
    Report's (an interval kind by its total length). Returns the records by view."""
    seen = {name: view(rep, rank, step) for name, view in STEP_VIEWS.items()}
    truth = report_record(rep, rank, step)
    for key in set().union(*seen.values()):
        values = {name: record[key] for name, record in seen.items() if key in record}
        assert len({json.dumps(v, sort_keys=True) for v in values.values()}) == 1, (rank, step, key, values)
        shown = next(iter(values.values()))
        assert (sum(length for _, length in shown) if key in INTERVALS else shown) == truth[key], (rank, step, key)
    return seen


def test_every_view_of_a_rank_and_step_shows_the_same_numbers():
    pytest.importorskip("dash")
    rep = tracelens.report(str(SAMPLES / "straggler"))
    expected = json.loads((SAMPLES / "straggler" / "metrics.expected").read_text())["ranks"]
    # Rank 0 waits for rank 3 at each of its 6 all-reduces; rank 3, the last to arrive, only transfers.
    for rank, step, waits in ((0, 3, 6), (3, 3, 0)):
        seen = assert_views_agree(rep, rank, step)
        record = seen["notebook"]
        assert set(record) == {"budget", "exposed_comm_fraction", "overlap_pct", "exposed", "transfer"} | (
            {"wait for peers"} if waits else set())
        # The annotated trace shows the same intervals and counters (the budget is no track of it).
        assert set(seen["annotated"]) == set(record) - {"budget"}
        # The generator's truth for the step: every segment of the bar, and 6 transfers of 1 ms each.
        truth = next(s for s in expected[str(rank)] if s["step"] == step)
        assert record["budget"] == {"compute only": truth["compute_ns"] - truth["overlap_ns"],
                                    "overlapped comm": truth["overlap_ns"], "exposed comm": truth["exposed_comm_ns"],
                                    "idle": truth["idle_ns"], "copy only": 0}
        assert [length for _, length in record["transfer"]] == [1_000_000] * 6
        assert len(record.get("wait for peers", [])) == waits
