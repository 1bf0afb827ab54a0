"""The dashboard's "Run B vs run A" section (``--compare``) says what ``tracelens diff A B`` says: run A is
BEFORE, run B AFTER, and the section draws the Diff the session was handed (made once, through api). Run A is
the real 40 ms slow rank, run B its re-run without the delay (tests/fixtures/recordings)."""

from __future__ import annotations

import pytest

pytest.importorskip("dash", reason="the dashboard extra (dash) is not installed")
pytest.importorskip("dash_ag_grid", reason="the dashboard extra (dash-ag-grid) is not installed")

from tracelens import api  # noqa: E402
from tracelens.cli import main  # noqa: E402
from tracelens.dashboards import Run, Session, layout  # noqa: E402

from conftest import ROOT, SAMPLES  # noqa: E402
from fixtures import dash_tree  # noqa: E402

RECORDINGS = ROOT / "tests" / "fixtures" / "recordings"
A, B = str(RECORDINGS / "gloo_slow40"), str(RECORDINGS / "gloo_baseline")


def _body_rows(table) -> list[list[str]]:
    body = next(c for c in table.children if c.__class__.__name__ == "Tbody")
    return [[dash_tree.text(td) for td in tr.children] for tr in body.children]


def _ms(ns) -> str:
    return f"{ns / 1e6:,.3f}"


@pytest.fixture(scope="module")
def session():
    """The Session `tracelens dashboard A --compare B` serves (the server itself left out)."""
    import tracelens.dashboards as dashboards

    served = {}
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dashboards, "serve", lambda s, **kw: served.update(session=s))
        assert main(["dashboard", A, "--compare", B]) == 0
    return served["session"]


@pytest.fixture(scope="module")
def expected():
    return api.diff(A, B)


def test_the_cli_hands_the_session_the_diff_of_a_before_b(session, expected):
    assert session.diff is not None
    assert session.diff.to_json() == expected.to_json()
    # A before B, the labels the paths given, as `tracelens diff A B` names them.
    assert (session.diff.before.label, session.diff.after.label) == (A, B)


def test_the_compare_section_says_the_answer_the_runs_and_the_prediction(session, expected):
    d = expected
    by_id = dash_tree.by_id(layout.compare_section(session))
    assert dash_tree.text(by_id["compare-summary"]) == d.summary
    # Faster without the slow rank, as BEFORE's verdict predicted (tests/golden/diff_gloo_slow40: 37.748 ms
    # observed, 38.403 ms predicted).
    assert d.step_change_ns < 0 and d.prediction.held and d.summary.endswith("the prediction held.")
    runs = _body_rows(by_id["compare-runs"])
    names = ["run A (before)", "run B (after)"]
    assert [r[:6] for r in runs] == [[name, _ms(s.step_ns), str(s.ranks), str(s.world_size), str(s.steps), s.mode]
                                     for name, s in zip(names, (d.before, d.after))]
    # BEFORE's culprit is the slow rank; AFTER has none.
    assert runs[0][6] == f"rank {d.before.culprit.rank} ({d.before.culprit.reason})" and d.after.culprit is None
    verdicts = [dash_tree.text(li) for li in by_id["compare-verdicts"].children]
    assert verdicts == [f"{name}'s verdict: {s.headline}" for name, s in zip(names, (d.before, d.after))]
    causes = {r[0]: r for r in _body_rows(by_id["compare-causes"])}
    assert list(causes) == [c.cause for c in d.causes]
    p = d.prediction
    said = f"{_ms(p.predicted_ns)} ({_ms(p.predicted_low_ns)}–{_ms(p.predicted_high_ns)})"
    fell = next(c for c in d.causes if c.cause == p.cause)
    assert causes[p.cause][1:] == [_ms(fell.before_ns), _ms(fell.after_ns), said]
    assert dash_tree.text(by_id["compare-prediction"]) == (
        f"prediction checked: {p.cause}: predicted {said} ms, observed {_ms(p.observed_ns)} ms: the prediction held")


def test_the_compare_section_lists_what_changed_most(session, expected):
    rows = _body_rows(dash_tree.by_id(layout.compare_section(session))["compare-changes"])
    assert rows == [[c.kind, c.name, _ms(c.before_ns), _ms(c.after_ns), f"{c.change_ns / 1e6:+,.3f}",
                     f"{c.before_count:g}", f"{c.after_count:g}"] for c in expected.changes]
    assert len(rows) == len(expected.changes) > 0
    # The largest change first: the idle time the slow rank's sleep left the other rank.
    assert rows[0][0] == "idle" and expected.changes[0].change_ns < 0
    # Runs of the same size, device and model: nothing to note.
    assert not expected.notes and "compare-notes" not in dash_tree.by_id(layout.compare_section(session))


def test_runs_that_differ_are_noted():
    """A GPU run against a CPU run of another model: the Diff's notes (another device, other work) are shown."""
    a, b = api.report(str(SAMPLES / "wfbp_100")), api.report(str(SAMPLES / "gloo_sawtooth"))
    d = api.compare_reports(a, b, before_label="wfbp_100", after_label="gloo_sawtooth")
    assert any("different devices: gpu before, cpu after" in n for n in d.notes)
    notes = dash_tree.by_id(layout.compare_section(Session([Run("A", a), Run("B", b)], diff=d)))["compare-notes"]
    assert [dash_tree.text(li) for li in notes.children] == [f"note: {n}" for n in d.notes]


def test_without_a_diff_the_section_draws_the_deltas_alone():
    """A Session made without one (a Python user's) is not compared again by the page: no Diff, no diff views."""
    rep = api.report(str(SAMPLES / "wfbp_100"))
    by_id = dash_tree.by_id(layout.compare_section(Session([Run("A", rep), Run("B", rep)])))
    assert "compare" in by_id and not any(k.startswith("compare-") for k in by_id)
