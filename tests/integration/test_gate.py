"""`tracelens gate` and `tracelens history`: rule decisions on runs with known metrics, output formats,
config files, exit codes, and concurrent history appends."""

import json
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from dataclasses import replace

import numpy as np
import pytest

import tracelens
from tracelens.cli import AGGREGATE_CHOICES, PATTERN_CHOICES, main
from tracelens.gating import AGGREGATES, PATTERNS, Baseline, GateConfig, aggregate, evaluate, step_frame
from tracelens.history_db import add_run, list_runs, open_db, run_steps

from conftest import SAMPLES
from fixtures import synth

SAWTOOTH = str(SAMPLES / "wfbp_100")     # generator truth: 82.5 % overlap, 2.1 of 16.47 ms exposed per step
TWO_PHASE = str(SAMPLES / "one_bucket")  # generator truth: 0 % overlap, all 12 ms exposed, critical diagnoses


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def synth_report(sc, tmp_path):
    folder = tmp_path / sc.name
    synth.write(sc, folder)
    return tracelens.analyze(tracelens.load(str(folder)))


def save(report, path):
    path.write_bytes(report.to_json())
    return str(path)


# --------------------------------------------------------------------------- absolute rules


def test_two_phase_fails_min_overlap_and_sawtooth_passes(capsys):
    code, out, err = run(capsys, "gate", TWO_PHASE, "--min-overlap-pct", "50", "--no-config")
    assert code == 1 and err == ""
    assert out.startswith("FAIL  min-overlap-pct") and "median 0.00 %" in out and "gate: FAILED" in out
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--min-overlap-pct", "50", "--no-config")
    assert code == 0 and "median 82.50 %" in out and "gate: passed (1 rules)" in out


def test_exposed_fraction_and_ms_limits_against_generator_truth(capsys):
    # wfbp_100 truth: 2.1 ms exposed of a 16.47 ms step -> fraction 0.1275.
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--no-config", "--max-exposed-fraction", "0.13",
                       "--max-exposed-ms", "2.1")
    assert code == 0, out
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--no-config", "--max-exposed-fraction", "0.12",
                       "--max-exposed-ms", "2.0")
    assert code == 1 and sum(line.startswith("FAIL") for line in out.splitlines()) == 2 and "median 0.1275" in out and "median 2.10 ms" in out


def test_no_critical_and_pattern_rules(capsys):
    code, out, _ = run(capsys, "gate", TWO_PHASE, "--no-config", "--no-critical", "--require-pattern", "sawtooth")
    assert code == 1
    assert "FAIL  no-critical" in out and "FAIL  require-pattern" in out and "pattern two-phase" in out
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--no-config", "--no-critical", "--require-pattern", "sawtooth")
    assert code == 0 and "PASS  no-critical" in out and "PASS  require-pattern" in out
    # Any of several patterns may be allowed.
    code, _, _ = run(capsys, "gate", TWO_PHASE, "--no-config", "--require-pattern", "sawtooth",
                     "--require-pattern", "two-phase")
    assert code == 0


def test_one_bad_rank_fails_the_gate_and_is_named(tmp_path):
    rep = tracelens.analyze(tracelens.load(SAWTOOTH))
    # Hand-edited: rank 1's step 3 drops to 40 % and its step 4 to 60 %; its median becomes 60 %.
    bad = rep.ranks[1]
    bad.steps[1] = _with(bad.steps[1], overlap_pct=40.0)
    bad.steps[2] = _with(bad.steps[2], overlap_pct=60.0)
    result = evaluate(rep, GateConfig(min_overlap_pct=70))
    rule = result.rules[0]
    assert not result.passed and rule.status == "fail"
    assert (rule.worst_rank, rule.worst_step, rule.value) == (1, 3, 60.0)
    assert [o.status for o in rule.ranks] == ["pass", "fail"] and "1 of 2 rank(s) fail; worst rank 1" in rule.message
    # With the worst step instead of the median, the value is the 40 % step.
    worst = evaluate(rep, GateConfig(min_overlap_pct=70, aggregate="worst")).rules[0]
    assert worst.value == 40.0 and worst.worst_step == 3


def _with(step, **changes):
    import msgspec

    return msgspec.structs.replace(step, **changes)


def test_undefined_overlap_fails_with_a_reason(tmp_path):
    # A run with no communication has no overlap % to gate on; the gate fails rather than passing blind.
    sc = synth.Scenario("no_comm", [(1 * synth.MS, 0)] * 2)
    rep = synth_report(sc, tmp_path)
    assert all(s.overlap_pct is None for r in rep.ranks for s in r.steps)
    rule = evaluate(rep, GateConfig(min_overlap_pct=10)).rules[0]
    assert rule.status == "fail" and "undefined: no communication" in rule.message


def test_aggregates_by_hand():
    v = np.array([10.0, 20.0, 30.0, 40.0, 100.0])
    # Higher is better (overlap): p90 is the 10th percentile, 10 + 0.4 * (20 - 10) = 14; worst is the min.
    assert aggregate(v, "median", True) == (30.0, 0)
    assert aggregate(v, "mean", True) == (40.0, 0)
    assert aggregate(v, "p90", True)[0] == pytest.approx(14.0)
    assert aggregate(v, "worst", True) == (10.0, 0)
    # Lower is better (exposed): p90 is the 90th percentile, 40 + 0.6 * (100 - 40) = 76; worst is the max.
    assert aggregate(v, "p90", False)[0] == pytest.approx(76.0)
    assert aggregate(v, "worst", False) == (100.0, 4)


def test_cli_choices_match_the_library():
    assert PATTERN_CHOICES == PATTERNS and AGGREGATE_CHOICES == AGGREGATES


# --------------------------------------------------------------------------- relative rules


def _last_bucket(comm_us):
    """compute_bound_8 with its last all-reduce lengthened: only that one is exposed."""
    base = synth.SCENARIOS["compute_bound_8"]
    return replace(base, name=f"cb8_{comm_us}", buckets=base.buckets[:-1] + [(5 * synth.MS, comm_us * synth.US)])


def _truth_overlap(sc):
    steps = synth.expected(sc)[0]
    return 100 * (1 - sum(s["exposed_comm_ns"] for s in steps) / sum(s["comm_ns"] for s in steps))


@pytest.mark.parametrize("comm_us, fails", [(650, True), (550, False)])
def test_baseline_catches_a_3_point_drop_and_passes_a_1_point_one(comm_us, fails, tmp_path, capsys):
    base_sc, cur_sc = synth.SCENARIOS["compute_bound_8"], _last_bucket(comm_us)
    # Generator truth: 3.5 of 4 ms hidden = 87.5 %; 3.5 / 4.15 = 84.34 % (-3.16 points); 3.5 / 4.05 = 86.42 % (-1.08).
    drop = _truth_overlap(base_sc) - _truth_overlap(cur_sc)
    assert drop == pytest.approx(3.16, abs=0.01) if fails else drop == pytest.approx(1.08, abs=0.01)
    baseline = save(synth_report(base_sc, tmp_path), tmp_path / "main.json")
    current = save(synth_report(cur_sc, tmp_path), tmp_path / "pr.json")
    code, out, _ = run(capsys, "gate", current, "--no-config", "--baseline", baseline, "--max-overlap-drop", "2",
                       "--format", "json")
    result = json.loads(out)
    assert code == (1 if fails else 0) and result["passed"] is not fails
    rule = result["rules"][0]
    assert rule["rule"] == "max-overlap-drop" and rule["value"] == pytest.approx(drop, abs=1e-4)
    assert all(o["baseline"] == pytest.approx(87.5) for o in rule["ranks"])


def test_exposed_rise_against_a_trace_folder_baseline(tmp_path):
    base = tracelens.analyze(tracelens.load(SAWTOOTH))
    cur = tracelens.analyze(tracelens.load(TWO_PHASE))
    result = evaluate(cur, GateConfig(max_exposed_rise=0.05), Baseline(step_frame(base), "wfbp_100"))
    rule = result.rules[0]
    # one_bucket exposes 12 ms of its step, wfbp_100 0.1275 of its: the rise is far over 0.05.
    assert rule.status == "fail" and rule.value > 0.05 and rule.ranks[0].baseline == pytest.approx(0.1275, abs=1e-4)


def test_ranks_missing_from_the_baseline_use_its_pooled_value(tmp_path):
    base = tracelens.analyze(tracelens.load(SAWTOOTH))      # ranks 0, 1
    cur = tracelens.analyze(tracelens.load(str(SAMPLES / "straggler")))   # ranks 0..3
    result = evaluate(cur, GateConfig(max_overlap_drop=50), Baseline(step_frame(base), "wfbp_100"))
    assert [o.rank for o in result.rules[0].ranks] == [0, 1, 2, 3]
    assert all(o.baseline == pytest.approx(82.5) for o in result.rules[0].ranks)
    assert any("ranks missing from the baseline" in n for n in result.notes)


# --------------------------------------------------------------------------- output formats


def test_junit_xml_parses_with_one_testcase_per_rule_and_rank(tmp_path, capsys):
    xml_path, md_path = tmp_path / "gate.xml", tmp_path / "summary.md"
    md_path.write_text("# earlier step\n")
    code, _, _ = run(capsys, "gate", TWO_PHASE, "--no-config", "--min-overlap-pct", "50", "--no-critical",
                     "--max-exposed-ms", "20", "--junit", str(xml_path), "--summary-md", str(md_path))
    assert code == 1
    root = ET.parse(xml_path).getroot()
    suite = root.find("testsuite")
    cases = suite.findall("testcase")
    # 3 rules x 2 ranks; min-overlap and no-critical fail on both ranks, max-exposed-ms (12 <= 20) passes.
    assert len(cases) == 6 and suite.get("tests") == "6" and root.get("tests") == "6"
    failed = [c for c in cases if c.find("failure") is not None]
    assert suite.get("failures") == str(len(failed)) == "4"
    assert {(c.get("classname"), c.get("name")) for c in failed} == {
        ("tracelens.gate.min-overlap-pct", "rank 0"), ("tracelens.gate.min-overlap-pct", "rank 1"),
        ("tracelens.gate.no-critical", "rank 0"), ("tracelens.gate.no-critical", "rank 1")}
    assert "median 0.00 %" in failed[0].find("failure").get("message")
    md = md_path.read_text()
    assert md.startswith("# earlier step\n### tracelens gate: ❌ FAILED (2 of 3 rules)")   # appended, not replaced
    assert "| ❌ | `min-overlap-pct` | ≥ 50 | rank 0 step" in md and "| ✅ | `max-exposed-ms` | ≤ 20 |" in md


def test_json_format_is_machine_readable(capsys):
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--no-config", "--min-overlap-pct", "90", "--format", "json")
    data = json.loads(out)
    assert code == 1 and data["schema"] == "tracelens.gate/1" and data["passed"] is False
    assert data["rules"][0]["limit"] == 90 and data["rules"][0]["value"] == 82.5
    assert [o["rank"] for o in data["rules"][0]["ranks"]] == [0, 1]


def test_saved_report_is_accepted_as_input(tmp_path, capsys):
    path = save(tracelens.analyze(tracelens.load(SAWTOOTH)), tmp_path / "report.json")
    code, out, _ = run(capsys, "gate", path, "--no-config", "--min-overlap-pct", "80")
    assert code == 0 and "median 82.50 %" in out
    code, out, _ = run(capsys, "report", path, "--format", "markdown")   # a saved report re-renders too
    assert code == 0 and "82.5 %" in out


# --------------------------------------------------------------------------- config and errors


def test_pyproject_config_is_read_and_flags_override(tmp_path, monkeypatch, capsys):
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [project]
        name = "demo"
        [tool.tracelens.gate]
        min-overlap-pct = 90
        require-pattern = "sawtooth"
    """))
    monkeypatch.chdir(tmp_path)
    code, out, _ = run(capsys, "gate", SAWTOOTH)
    assert code == 1 and "FAIL  min-overlap-pct  ≥ 90" in out and "PASS  require-pattern" in out
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--min-overlap-pct", "80")   # the flag wins
    assert code == 0 and "≥ 80" in out


def test_tracelens_toml_with_relative_baseline_path(tmp_path, monkeypatch, capsys):
    conf = tmp_path / "ci"
    conf.mkdir()
    save(tracelens.analyze(tracelens.load(SAWTOOTH)), conf / "main.json")
    (conf / "tracelens.toml").write_text('[gate]\nbaseline = "main.json"\nmax_overlap_drop = 2.0\n'
                                         'aggregate = "worst"\n')
    monkeypatch.chdir(conf)
    code, out, _ = run(capsys, "gate", TWO_PHASE)
    assert code == 1 and "worst 0.00 % vs baseline 82.50 %" in out and "main.json" in out


@pytest.mark.parametrize("config, message", [
    ("[gate]\nmin-overlap = 80\n", "unknown key 'min-overlap'"),
    ("[gate]\nmin-overlap-pct = \"high\"\n", "min-overlap-pct: expected a number"),
    ("[gate]\nmin-overlap-pct = 180\n", "outside [0, 100]"),
    ("[gate]\nno-critical = \"yes\"\n", "no-critical: expected true or false"),
    ("[gate]\nrequire-pattern = \"zigzag\"\n", "unknown pattern 'zigzag'"),
    ("[gate]\naggregate = \"max\"\n", "unknown aggregate 'max'"),
    ("[gate\n", "not valid TOML"),
    ("[gate]\nmax-overlap-drop = 2\n", "needs --baseline"),
    ("[gate]\n", "no gate rules given"),
])
def test_bad_config_exits_2_with_a_clear_message(config, message, tmp_path, capsys):
    path = tmp_path / "tracelens.toml"
    path.write_text(config)
    code, out, err = run(capsys, "gate", SAWTOOTH, "--config", str(path))
    assert code == 2 and out == "" and message in err and err.count("\n") == 1, err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["--history", "x.db", "--max-overlap-drop", "1"], "needs --against"),
    (["--against", "main", "--max-overlap-drop", "1"], "--against needs --history"),
    (["--baseline", "a.json", "--min-overlap-pct", "1"], "no relative rule"),
    (["--min-overlap-pct", "1", "--config", "missing.toml"], "no such config file"),
    (["--min-overlap-pct", "1", "--aggregate", "max"], "invalid value for '--aggregate'"),
])
def test_bad_flags_exit_2(args, message, capsys):
    code, _, err = run(capsys, "gate", SAWTOOTH, *args)
    assert code == 2 and message in err


def test_unreadable_report_exits_3(tmp_path, capsys):
    bad = tmp_path / "report.json"
    bad.write_text('{"schema": "tracelens.report/1", "ranks": 7}')
    code, _, err = run(capsys, "gate", str(bad), "--no-config", "--min-overlap-pct", "1")
    assert code == 3 and "malformed report" in err and str(bad) in err


# --------------------------------------------------------------------------- history


def test_history_add_list_show_and_gate_against_latest_label(tmp_path, capsys):
    db = str(tmp_path / "ci.db")   # created on first use
    assert run(capsys, "history", "add", TWO_PHASE, "--db", db, "--label", "main", "--commit", "aaa")[0] == 0
    assert run(capsys, "history", "add", TWO_PHASE, "--db", db, "--label", "feature")[0] == 0
    code, out, _ = run(capsys, "history", "add", SAWTOOTH, "--db", db, "--label", "main", "--commit", "ccc")
    assert code == 0 and out.startswith("added run 3 (main): 2 rank(s), 3 step(s), overlap 82.5 %")
    code, out, _ = run(capsys, "history", "list", "--db", db, "--format", "json")
    runs = json.loads(out)
    assert [r["id"] for r in runs] == [3, 2, 1] and runs[0]["commit"] == "ccc" and runs[2]["critical"] > 0
    code, out, _ = run(capsys, "history", "show", "3", "--db", db)
    assert code == 0 and "82.5 %" in out and out.count("sawtooth") == 1 + 6   # the run row, then 2 x 3 steps
    # The latest "main" run (3, sawtooth, 82.5 %) is the baseline, not the earlier two-phase one.
    code, out, _ = run(capsys, "gate", TWO_PHASE, "--no-config", "--history", db, "--against", "main",
                       "--max-overlap-drop", "2")
    assert code == 1 and "run 3 (main @ ccc" in out and "vs baseline 82.50 %" in out


def test_empty_history_skips_relative_rules_visibly(tmp_path, capsys):
    xml_path = tmp_path / "g.xml"
    code, out, _ = run(capsys, "gate", SAWTOOTH, "--no-config", "--history", str(tmp_path / "new.db"),
                       "--against", "main", "--max-overlap-drop", "2", "--junit", str(xml_path))
    assert code == 0 and "SKIP  max-overlap-drop" in out and "does not exist yet" in out
    assert ET.parse(xml_path).getroot().get("skipped") == "1"


def test_history_errors(tmp_path, capsys):
    code, _, err = run(capsys, "history", "list", "--db", str(tmp_path / "none.db"))
    assert code == 2 and "no such history database" in err
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite at all " * 100)
    code, _, err = run(capsys, "history", "list", "--db", str(junk))
    assert code == 3 and "junk.db" in err
    code, _, err = run(capsys, "history", "show", "9", "--db", str(junk))
    assert code == 3


def test_history_rows_round_trip_the_report(tmp_path):
    rep = tracelens.analyze(tracelens.load(SAWTOOTH))
    with open_db(tmp_path / "h.db", create=True) as db:
        run_id = add_run(db, rep, label="main", commit="abc")
        steps = run_steps(db, run_id)
        assert list_runs(db)[0]["overlap_pct"] == rep.summary.overlap_pct
    frame = step_frame(rep)
    assert steps[list(frame.columns)].astype(object).equals(frame.astype(object))


_WRITER = textwrap.dedent("""
    import sys
    from tracelens.history_db import add_run, open_db
    from tracelens.contract import read_report
    report = read_report(sys.argv[1])
    for i in range(int(sys.argv[4])):
        with open_db(sys.argv[2], create=True) as db:
            add_run(db, report, label=sys.argv[3], commit=str(i))
""")


def test_concurrent_history_adds_lose_nothing(tmp_path):
    report = save(tracelens.analyze(tracelens.load(SAWTOOTH)), tmp_path / "r.json")
    db, writers, each = tmp_path / "shared.db", 6, 5
    procs = [subprocess.Popen([sys.executable, "-c", _WRITER, report, str(db), f"job{w}", str(each)])
             for w in range(writers)]
    assert [p.wait(timeout=120) for p in procs] == [0] * writers
    with open_db(db, create=False) as h:
        runs = h.execute("select label, count(*) from runs group by label").fetchall()
        steps = h.execute("select count(*) from rank_steps").fetchone()[0]
        orphans = h.execute("select count(*) from rank_steps where run_id not in (select id from runs)").fetchone()
    assert sorted(runs) == [(f"job{w}", each) for w in range(writers)]
    assert steps == writers * each * 6 and orphans[0] == 0     # wfbp_100: 2 ranks x 3 steps per run
