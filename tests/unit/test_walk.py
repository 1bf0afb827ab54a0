"""Input walking: every real file once, never round a symlink cycle, and ``**`` globs matching what
``glob.glob(recursive=True)`` matches on trees without links (the reference the tests compare with)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tracelens.parsers import discover, walk

PATTERNS = ["**/*.json", "**", "a/**/*.gz", "a/*/*.json", "*/b/*", "**/b/*.json", "**/[r]ank?.json",
            "**/[!r]*", "a/**", ".hidden/**", "**/.x.json", "a/b/**/c/*.json"]


@pytest.fixture
def tree(tmp_path, monkeypatch):
    for rel in ("r0.json", "a/rank1.json", "a/b/rank2.json", "a/b/c/rank3.json.gz", "a/b/c/d/e.json",
                "a/.x.json", ".hidden/h.json", "z/b/rank4.json", "z/b/c/notes.txt"):
        f = tmp_path / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("{}")
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize("pattern", PATTERNS)
def test_glob_matches_the_standard_glob_without_links(tree, pattern):
    expected = sorted(Path(f) for f in glob.glob(pattern, recursive=True) if Path(f).is_file())
    assert walk.glob_files(pattern) == expected
    absolute = str(tree / pattern)
    assert walk.glob_files(absolute) == sorted(Path(f) for f in glob.glob(absolute, recursive=True)
                                               if Path(f).is_file())


def _loops(root: Path) -> Path:
    """A trace with two links back up the tree beside it: glob.glob reads it again at every level of
    every combination of links (exponential: the issue's hang), rglob(3.11) not at all through links."""
    deep = root / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "rank0.json").write_text("{}")
    (deep / "up").symlink_to("..")
    (deep / "up2").symlink_to("../..")
    return deep / "rank0.json"


def test_symlink_loops_give_each_file_once(tmp_path, monkeypatch):
    trace = _loops(tmp_path)
    monkeypatch.chdir(tmp_path)
    assert walk.glob_files("**/*.json") == [trace.relative_to(tmp_path)]
    assert walk.files_under(tmp_path) == [trace]


def test_a_symlinked_run_folder_is_read_once(tmp_path):
    run = tmp_path / "runs" / "2026-11-23"
    run.mkdir(parents=True)
    (run / "rank0.json").write_text("{}")
    (tmp_path / "runs" / "latest").symlink_to(run.name)
    (tmp_path / "elsewhere").symlink_to(run)           # reached only through a link: still found
    assert walk.files_under(tmp_path / "runs") == [run / "rank0.json"]
    assert walk.files_under(tmp_path / "elsewhere") == [tmp_path / "elsewhere" / "rank0.json"]


SAMPLE = Path(__file__).resolve().parents[2] / "sample_traces" / "wfbp_100" / "rank0.json.gz"


def test_report_over_symlink_loops_finishes_and_reads_the_trace_once(tmp_path):
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    (deep / "rank0.json.gz").write_bytes(SAMPLE.read_bytes())
    (deep / "up").symlink_to("..")
    (deep / "up2").symlink_to("../..")
    assert discover([str(tmp_path / "**" / "*.json.gz")]) == [deep / "rank0.json.gz"]
    # The CLI the way a user runs it: before, this did not finish (killed by the timeout).
    done = subprocess.run([str(Path(sys.executable).with_name("tracelens")), "report", "**/*.json.gz", "--format", "json"],
                          cwd=tmp_path, capture_output=True, timeout=60, text=True,
                          env={**os.environ, "TRACELENS_JOBS": "0"})
    assert done.returncode == 0, done.stderr
    assert '"path": "a/b/rank0.json.gz"' in done.stdout and done.stdout.count('"format": "kineto"') == 1
