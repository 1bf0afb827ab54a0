"""`tracelens diff BEFORE AFTER` (issue 48): the step time and the causes of two runs side by side, what BEFORE's
verdict predicted for the change against what AFTER shows, what got faster or slower. Goldens of its text,
Markdown and JSON are tests/golden/diff_* (a real re-run and a generated pair)."""

from __future__ import annotations

import dataclasses
import json
import statistics

import pytest

import tracelens
from tracelens.cli import main

from conftest import ROOT
from fixtures import synth

MS = 1_000_000
RECORDINGS = ROOT / "tests" / "fixtures" / "recordings"


def write(tmp_path, sc):
    synth.write(sc, tmp_path / sc.name)
    return str(tmp_path / sc.name)


def truth_step(sc) -> float:
    """The generator's mean over ranks of each rank's mean step."""
    return statistics.fmean(statistics.fmean(s["duration_ns"] for s in rows) for rows in synth.expected(sc).values())


def test_a_late_rank_removed_the_step_time_and_the_prediction(tmp_path):
    before = synth.SCENARIOS["culprit_host_gap"]
    after = dataclasses.replace(before, name="on_time", culprit_ns=0)
    d = tracelens.api.diff(write(tmp_path, before), write(tmp_path, after))
    # Generator truth: 13.95 ms steps, 10.95 ms once rank 5 comes on time.
    assert (d.before.step_ns, d.after.step_ns) == (round(truth_step(before)), round(truth_step(after)))
    assert d.step_change_ns == -3 * MS and d.step_change == pytest.approx(-3 / 13.95)
    p = d.prediction
    assert (p.cause, p.predicted_ns, p.observed_ns, p.held) == ("peer-wait", 3 * MS, 3 * MS, True)
    assert d.before.culprit.rank == 5 and d.after.culprit is None
    assert d.summary == ("The step got faster by 3.000 ms (13.950 ms → 10.950 ms, 21.5 %); for removing the wait for "
                         "the last rank BEFORE's verdict predicted 3.000 ms, observed 3.000 ms: the prediction held.")
    idle = next(c for c in d.changes if c.kind == "idle")
    assert idle.change_ns < 0 and not d.notes


def test_the_real_re_run_says_the_observed_amount_and_that_the_prediction_held():
    """The 40 ms slow rank removed (bench/RESULTS.md): the step change is the two runs' own step times, as a
    report of each gives them (the mean over ranks of each rank's mean complete step)."""
    b, a = (tracelens.report(str(RECORDINGS / n), cache=False) for n in ("gloo_slow40", "gloo_baseline"))
    step = {id(r): statistics.fmean(statistics.fmean(s.duration_ns for s in x.steps if s.complete) for x in r.ranks)
            for r in (b, a)}
    d = tracelens.api.diff(str(RECORDINGS / "gloo_slow40"), str(RECORDINGS / "gloo_baseline"))
    assert d.step_change_ns == round(step[id(a)]) - round(step[id(b)]) < 0
    pw = next(c for c in b.verdict.causes if c.cause == "peer-wait")
    assert (d.prediction.cause, d.prediction.predicted_ns) == ("peer-wait", pw.saving_ns)
    assert d.prediction.observed_ns == -d.step_change_ns and d.prediction.held
    assert d.summary.startswith(f"The step got faster by {-d.step_change_ns / 1e6:.3f} ms")
    assert d.summary.endswith("the prediction held.")


def test_runs_of_another_size_or_model_are_compared_and_the_differences_named(tmp_path):
    eight = synth.SCENARIOS["culprit_host_gap"]
    four = dataclasses.replace(eight, name="four", ranks=4, culprit=1)
    d = tracelens.api.diff(write(tmp_path, eight), write(tmp_path, four))
    assert d.before.ranks == 8 and d.after.ranks == 4
    assert any("different sizes: 8 rank(s)" in n for n in d.notes)
    # Another model: every name of BEFORE's work is gone.
    d = tracelens.api.diff(write(tmp_path, synth.SCENARIOS["wfbp_100"]),
                           str(ROOT / "sample_traces" / "gloo_sawtooth"))
    assert any("a different model, build or input" in n for n in d.notes)
    assert any("different devices: gpu before, cpu after" in n for n in d.notes)


def test_a_cause_without_a_prediction_says_so(tmp_path):
    """On CPU ranks the transfers no compute hides have no saving: a change that shrinks them is checked
    against nothing, and the summary says why."""
    d = tracelens.api.diff(str(ROOT / "sample_traces" / "gloo_one_bucket"), str(ROOT / "sample_traces" /
                                                                              "gloo_sawtooth"))
    if d.prediction is not None and d.prediction.cause == "not-overlapped":
        assert d.prediction.predicted_ns is None and d.prediction.held is None
        assert "made no prediction (CPU ranks:" in d.summary
    else:
        pytest.fail(f"expected the transfers to shrink from one bucket to many: {d.causes}")


def test_saved_reports_compare_as_their_traces(tmp_path, capsys):
    paths = []
    for name in ("gloo_slow40", "gloo_baseline"):
        out = tmp_path / f"{name}.json"
        assert main(["report", str(RECORDINGS / name), "--format", "json", "-o", str(out)]) == 0
        paths.append(out)
    capsys.readouterr()
    assert main(["diff", *map(str, paths), "--format", "json"]) == 0
    from_reports = json.loads(capsys.readouterr().out)
    assert main(["diff", str(RECORDINGS / "gloo_slow40"), str(RECORDINGS / "gloo_baseline"), "--format", "json"]) == 0
    from_traces = json.loads(capsys.readouterr().out)
    for doc in (from_reports, from_traces):
        doc.pop("before"), doc.pop("after"), doc.pop("summary")      # they name their inputs
    assert from_reports == from_traces and from_reports["schema"] == "tracelens.diff/1"


def test_a_missing_input_is_one_line_and_exit_2(tmp_path, capsys):
    code = main(["diff", str(tmp_path / "nope"), str(RECORDINGS / "gloo_baseline")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "nope" in err
