"""The fuzzer in CI: a fixed set of seeded cases per format, every committed regression case, and a few
cases through the real ``tracelens`` console script. Each must exit 0, 2 or 3, print no traceback, answer
within its time, and report strict JSON whose numbers lie within the trace's span (check.py); a run folder
whose manifest is mutated must also open no file outside it (driver.py); history list/show and gates on a
mutated history database, and reports and gates reading a mutated config file, give strict JSON or a one-line
error.

Budget: CI has 2 cores; 280 cases per trace format, 160 run folders, 80 history databases and 80 config
files run in driver subprocesses (100 in-process cases each, two at a time): 800 cases, as many as before
the last two formats, about 13 s per trace format, 12 s for the run folders and 3 s each for the other two
(README.md); 80 sets of NCCL Inspector logs, 2 s. The dashboard's requests are fuzzed in-process
(test_dashboard.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import corpus_file
from fuzz import check, driver
from fuzz.run import run_batches

CI_SEED = 17
# 800 cases in all, as before history databases and config files were fuzzed: 40 traces and 40 exports fewer.
CI_CASES = {"kineto": 280, "nsys": 280, "manifest": 160, "history": 80, "config": 80}
# Saved reports (about 0.1 s a case) and output plants (a writer each, about 0.3 s): under 30 s together here.
CI_CASES |= {"report": 160, "outputs": 50}
# NCCL Inspector logs (a scenario's logs, one spoiled; about 20 ms a case): 2 s here.
CI_CASES |= {"inspector": 80}
# Smaller batches where one is all the set would be: two jobs then share the work.
CI_BATCH = {"outputs": 25}
HERE = Path(__file__).resolve().parent
REGRESSIONS = sorted((HERE / "regressions").glob("*.json"))


def _summary(rows: list[dict]) -> str:
    return "\n".join(f"{r['format']} seed {r.get('seed')} case {r.get('index')}: {r['problems'][0][:300]}\n"
                     f"    base {r.get('base')} ops {json.dumps(r.get('ops'))[:300]}" for r in rows)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", list(CI_CASES))
def test_ci_fuzz_set(fmt):
    if fmt in ("kineto", "nsys"):       # the run folders, history databases and configs are of bundled samples
        corpus_file((driver.KINETO_BASES if fmt == "kineto" else driver.NSYS_BASES)[0][len("corpus/"):])
    rows = run_batches(fmt, CI_SEED, CI_CASES[fmt], jobs=2, batch=CI_BATCH.get(fmt, 100))
    assert len(rows) == CI_CASES[fmt]
    failed = [r for r in rows if r["problems"]]
    assert not failed, f"{len(failed)} fuzz finding(s) (replay: python tests/fuzz/driver.py {fmt} {CI_SEED} " \
                       f"INDEX 1):\n{_summary(failed)}"
    # The set reaches both outcomes: reports and one-line refusals (a config's bad value is a usage error).
    codes = {r["code"] for r in rows}
    assert 0 in codes and codes & {2, 3} and codes <= {0, 1, 2, 3}, codes


def test_every_regression_case_passes():
    corpus_file("hta")
    proc = subprocess.run([sys.executable, str(HERE / "driver.py"), "replay", *map(str, REGRESSIONS)],
                          capture_output=True, text=True, timeout=300)
    rows = [json.loads(line) for line in proc.stdout.splitlines() if '"code"' in line]
    assert proc.returncode == 0 and len(rows) == len(REGRESSIONS) >= 28, proc.stderr[-2000:]
    failed = [r for r in rows if r["problems"]]
    assert not failed, _summary(failed)


def test_plans_are_reproducible():
    corpus_file("hta")
    assert [driver.draw("kineto", CI_SEED, i) for i in range(20)] == [driver.draw("kineto", CI_SEED, i) for i in range(20)]
    assert driver.draw("nsys", CI_SEED, 3) == driver.draw("nsys", CI_SEED, 3)
    assert driver.draw("nsys", CI_SEED, 3) != driver.draw("nsys", CI_SEED + 1, 3)
    assert [driver.draw("manifest", CI_SEED, i) for i in range(20)] == \
        [driver.draw("manifest", CI_SEED, i) for i in range(20)]
    for fmt in ("report", "outputs", "inspector"):
        assert [driver.draw(fmt, CI_SEED, i) for i in range(20)] == [driver.draw(fmt, CI_SEED, i) for i in range(20)]
        assert [driver.draw(fmt, CI_SEED, i) for i in range(20)] != [driver.draw(fmt, CI_SEED + 1, i) for i in range(20)]


@pytest.mark.parametrize("fmt, index", [("kineto", i) for i in range(4)] + [("nsys", i) for i in range(4)]
                         + [("manifest", i) for i in range(2)])
def test_cases_through_the_console_script(fmt, index, tmp_path):
    """The real ``tracelens`` process: its exit path (no teardown) and default decode workers included."""
    corpus_file("hta")
    tracelens = Path(sys.executable).with_name("tracelens")
    case = driver.draw(fmt, CI_SEED + 1000, index)
    path, span = driver.materialise(case, tmp_path)
    env = {**os.environ, "TRACELENS_MAX_INFLATE": "32M", "NO_COLOR": "1"}
    env.pop("TRACELENS_JOBS", None)
    proc = subprocess.run([str(tracelens), "report", "--format", "json", str(path)], capture_output=True, text=True,
                          timeout=60, env=env, cwd=tempfile.gettempdir())
    assert check.problems(proc.returncode, proc.stdout, proc.stderr, span) == [], (case, proc.stderr[-2000:])
