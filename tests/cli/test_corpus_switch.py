"""TRACELENS_REQUIRE_CORPUS (set by CI) turns a corpus skip into a failure; without it a clone skips."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow       # runs pytest itself, several times

HERE = Path(__file__).resolve().parents[1]      # tests/


def _run(tmp_path: Path, corpus: bool, require: bool) -> subprocess.CompletedProcess:
    proj = tmp_path / "proj"
    (proj / "tests").mkdir(parents=True)
    shutil.copy(HERE / "conftest.py", proj / "tests" / "conftest.py")
    (proj / "tests" / "test_one.py").write_text(
        "from conftest import corpus_file\n\ndef test_needs_corpus():\n    corpus_file('kineto/not-there.json')\n")
    if corpus:
        (tmp_path / "shared" / "corpus").mkdir(parents=True)
    env = {k: v for k, v in os.environ.items() if k != "TRACELENS_REQUIRE_CORPUS"}
    if require:
        env["TRACELENS_REQUIRE_CORPUS"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(proj),
                           "-o", "pythonpath=tests", str(proj / "tests")],
                          cwd=proj, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("corpus", [False, True])
def test_without_the_switch_a_missing_corpus_skips(tmp_path, corpus):
    res = _run(tmp_path, corpus=corpus, require=False)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "1 skipped" in res.stdout


def test_with_the_switch_a_missing_corpus_file_fails(tmp_path):
    res = _run(tmp_path, corpus=True, require=True)
    assert res.returncode == 1, res.stdout + res.stderr
    assert "1 failed" in res.stdout and "TRACELENS_REQUIRE_CORPUS is set" in res.stdout


def test_with_the_switch_a_missing_corpus_folder_stops_the_run(tmp_path):
    res = _run(tmp_path, corpus=False, require=True)
    assert res.returncode != 0
    assert "TRACELENS_REQUIRE_CORPUS is set but the shared corpus is not at" in res.stdout + res.stderr
