"""An input with nothing in it (issue 46, item 13): no bytes, or JSON whitespace only, in a plain file or
inside gzip. Every reader says ``empty file`` naming the file, one line, exit 3 (docs/errors.md), where the
JSON decoder's "Input data was truncated" sent one looking for a writer that died half-way."""

from __future__ import annotations

import gzip
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import tracelens
from tracelens.errors import InputError

from conftest import SAMPLES

SAMPLE = SAMPLES / "wfbp_100"
TRACELENS = str(Path(sys.executable).with_name("tracelens"))
CONTENTS = {"no bytes": b"", "whitespace": b" \n\t\r\n  "}


def cli(*args, cwd=None):
    done = subprocess.run([TRACELENS, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "NO_COLOR": "1"})
    return done.returncode, done.stdout, done.stderr


def _empty(tmp_path, name: str, content: bytes, zipped: bool = False):
    path = tmp_path / name
    path.write_bytes(gzip.compress(content, mtime=0) if zipped else content)
    return path


def _sample_with(tmp_path, name: str, content: bytes):
    """A copy of the sample run with ``name`` holding ``content`` beside its traces."""
    run = tmp_path / "run"
    shutil.copytree(SAMPLE, run)
    return run, _empty(run, name, content)


def _says_empty(code: int, err: str, path) -> bool:
    return code == 3 and err == f"tracelens: error: {path}: empty file\n"


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS)
@pytest.mark.parametrize("name, zipped", [("rank0.json", False), ("rank0.json.gz", False),
                                          ("rank0.json.gz", True), ("report.json", False)],
                         ids=["json", "json.gz of no gzip", "json.gz", "report.json"])
def test_every_command_that_reads_a_trace_says_empty_file(tmp_path, name, zipped, content):
    path = _empty(tmp_path, name, content, zipped)
    for args in (["report", path], ["report", path, "--format", "json"], ["export", path, "-o", tmp_path / "x"],
                 ["annotate", path, "-o", tmp_path / "y"], ["gate", path, "--min-overlap-pct", "1"],
                 ["diff", path, SAMPLE], ["diff", SAMPLE, path]):
        code, _, err = cli(*map(str, args))
        assert _says_empty(code, err, path), (args, code, err)


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS)
def test_a_trace_in_a_folder_and_the_library_say_empty_file(tmp_path, content):
    # In a folder an empty file is left to the parser (parsers.sniff_json): a rank whose writer never wrote
    # is an input error, not a file to skip. The library raises what the command prints.
    run, path = _sample_with(tmp_path, "rank2.json", content)
    code, _, err = cli("report", str(run))
    assert _says_empty(code, err, path), err
    with pytest.raises(InputError, match="empty file") as raised:
        tracelens.report(str(path))
    assert raised.value.path == str(path)


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS)
def test_a_saved_report_read_as_one_says_empty_file(tmp_path, content):
    # A baseline, and contract.read_report itself: what a caller that knows the file is a saved report calls.
    from tracelens.contract import read_report

    path = _empty(tmp_path, "baseline.json", content)
    code, _, err = cli("gate", str(SAMPLE), "--baseline", str(path), "--max-overlap-drop", "1")
    assert _says_empty(code, err, path), err
    with pytest.raises(InputError, match="^.*: empty file$"):
        read_report(path)


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS)
def test_an_empty_manifest_says_empty_file(tmp_path, content):
    run, path = _sample_with(tmp_path, "manifest.json", content)
    code, _, err = cli("report", str(run))
    assert code == 3 and err == f"tracelens: error: {path}: not a readable manifest: empty file\n"


@pytest.mark.parametrize("name", ["profile.sqlite", "profile.nsys-rep"])
def test_an_empty_nsight_systems_file_says_empty_file(tmp_path, name):
    # Before: a .sqlite of no bytes opened as a database of no tables ("no CUPTI_ACTIVITY_KIND_KERNEL
    # table"), and a .nsys-rep of none asked for Nsight Systems to convert it.
    path = _empty(tmp_path, name, b"")
    code, _, err = cli("report", str(path))
    assert _says_empty(code, err, path), err


@pytest.mark.parametrize("content", CONTENTS.values(), ids=CONTENTS)
def test_an_empty_config_file_is_a_config_of_no_settings(tmp_path, content):
    # Unlike JSON, TOML defines an empty document: it sets nothing, so the defaults hold (docs/errors.md).
    config = _empty(tmp_path, "tracelens.toml", content)
    assert cli("report", str(SAMPLE), "--format", "json", cwd=tmp_path)[0] == 0
    code, _, err = cli("gate", str(SAMPLE), "--config", str(config), "--min-overlap-pct", "1")
    assert code == 0, err
