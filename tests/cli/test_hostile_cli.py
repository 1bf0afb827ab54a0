"""Hostile surroundings of the command line (issue: hostile input): outputs that cannot be written, config
files and history databases that are not what they claim, a baseline that compares nothing. Each was a
traceback, or a gate that passed having compared nothing, before. Run through the installed console
script, as a user runs it: a full disk is only seen on a real file descriptor."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES

SAMPLE = str(SAMPLES / "wfbp_100")
TRACELENS = str(Path(sys.executable).with_name("tracelens"))
FULL = Path("/dev/full")
needs_dev_full = pytest.mark.skipif(not FULL.exists(), reason="no /dev/full on this system")


def cli(*args, cwd=None, stdout=None):
    done = subprocess.run([TRACELENS, *args], cwd=cwd, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True, timeout=120, env={**os.environ, "NO_COLOR": "1"})
    return done.returncode, done.stdout or "", done.stderr


def one_line_error(err: str, *words: str) -> bool:
    return (err.startswith("tracelens: error: ") and err.count("\n") == 1 and "Traceback" not in err
            and all(w in err for w in words))


# ---------------------------------------------------------------------------------------------- outputs

def test_output_naming_a_directory(tmp_path):
    code, _, err = cli("report", SAMPLE, "-o", str(tmp_path))
    # Before: "output file exists (use --force ...)", and with --force an IsADirectoryError.
    assert code == 2 and one_line_error(err, str(tmp_path), "is a directory")
    assert cli("report", SAMPLE, "-o", str(tmp_path), "--force")[0] == 2


def test_junit_naming_a_directory(tmp_path):
    code, _, err = cli("gate", SAMPLE, "--min-overlap-pct", "50", "--junit", str(tmp_path))
    assert code == 2 and one_line_error(err, str(tmp_path), "Is a directory")


@needs_dev_full
@pytest.mark.parametrize("args", [("report", SAMPLE, "-o", "/dev/full"),
                                  ("report", SAMPLE, "--format", "json", "-o", "/dev/full"),
                                  ("gate", SAMPLE, "--min-overlap-pct", "50", "--summary-md", "/dev/full")])
def test_output_file_on_a_full_disk(args):
    code, _, err = cli(*args)
    # /dev/full is a device, not a file to overwrite: no --force asked; the write fails with ENOSPC.
    assert code == 2 and one_line_error(err, "/dev/full", "No space left on device")


@needs_dev_full
@pytest.mark.parametrize("args", [("report", SAMPLE), ("report", SAMPLE, "--format", "json"),
                                  ("gate", SAMPLE, "--min-overlap-pct", "50")])
def test_standard_output_on_a_full_disk(args):
    with open(FULL, "w") as full:
        code, _, err = cli(*args, stdout=full)
    assert code == 2 and one_line_error(err, "standard output", "No space left on device")


def test_output_to_a_device_needs_no_force():
    code, _, err = cli("report", SAMPLE, "-o", os.devnull)
    assert code == 0 and err == ""


# ----------------------------------------------------------------------------------------- config files

@pytest.mark.parametrize("text, words", [
    ("tool = 5\n", ("[tool] must be a table",)),
    ("[tool]\ntracelens = 5\n", ("[tool.tracelens] must be a table",)),
    ("[tool.tracelens]\ngate = 5\n", ("[tool.tracelens.gate] must be a table",)),
    ("[tool.tracelens]\nthresholds = [1]\n", ("[tool.tracelens.thresholds] must be a table",)),
])
def test_pyproject_of_the_wrong_shape(tmp_path, text, words):
    (tmp_path / "pyproject.toml").write_text(text)
    code, _, err = cli("gate", SAMPLE, "--min-overlap-pct", "50", cwd=tmp_path)
    assert code == 2 and one_line_error(err, "pyproject.toml", *words)


def test_config_that_is_not_utf8(tmp_path):
    (tmp_path / "tracelens.toml").write_bytes(b"[gate]\nmin_overlap_pct = 50\n# caf\xe9\n")
    code, _, err = cli("gate", SAMPLE, cwd=tmp_path)
    assert code == 2 and one_line_error(err, "tracelens.toml", "not UTF-8")


def test_a_limit_of_zero_is_a_rule(tmp_path):
    # 0 == False in Python: the flag was dropped as if not given, and the gate said "no gate rules given".
    code, out, err = cli("gate", SAMPLE, "--min-overlap-pct", "0", "--no-config")
    assert code == 0 and err == "" and "PASS  min-overlap-pct" in out


# --------------------------------------------------------------------------------------------- baseline

def test_a_baseline_without_ranks_does_not_pass(tmp_path):
    base = tmp_path / "base.json"
    assert cli("report", SAMPLE, "--format", "json", "-o", str(base))[0] == 0
    doc = json.loads(base.read_text())
    doc["ranks"] = []
    base.write_text(json.dumps(doc))
    code, out, err = cli("gate", SAMPLE, "--baseline", str(base), "--max-overlap-drop", "1", "--no-config")
    # Before: every rank SKIP, "gate: passed", exit 0 — a CI gate that compared nothing.
    assert code == 1 and "FAIL  max-overlap-drop" in out and "nothing compared" in out and "no ranks" in out


# ---------------------------------------------------------------------------------------------- history

def _foreign(path: Path, *statements: str) -> bytes:
    with sqlite3.connect(path) as conn:
        for sql in statements:
            conn.execute(sql)
    conn.close()
    return path.read_bytes()


@pytest.mark.parametrize("statements", [
    ("create table runs (x text)", "insert into runs values ('1')"),
    ("create table runs (id integer primary key, label text)", "create table meta (key text, value text)"),
    ("create table meta (key text, value text)", "create table other (x)"),
])
@pytest.mark.parametrize("command", ["add", "list", "gate"])
def test_history_of_a_foreign_schema(tmp_path, statements, command):
    db = tmp_path / "other.db"
    before = _foreign(db, *statements)
    args = {"add": ("history", "add", SAMPLE, "--db", str(db), "--label", "main"),
            "list": ("history", "list", "--db", str(db)),
            "gate": ("gate", SAMPLE, "--history", str(db), "--against", "main", "--max-overlap-drop", "1",
                     "--no-config")}[command]
    code, _, err = cli(*args)
    # Before: sqlite_utils AlterError (add), or a gate that passed with "no run labelled main yet".
    assert code == 3 and one_line_error(err, str(db), "history")
    assert db.read_bytes() == before                       # another program's database is left as it was


def test_history_with_text_where_numbers_belong(tmp_path):
    db = tmp_path / "h.db"
    assert cli("history", "add", SAMPLE, "--db", str(db), "--label", "main")[0] == 0
    with sqlite3.connect(db) as conn:
        conn.execute("update rank_steps set overlap_pct = 'abc' where rank = 1")
    conn.close()
    for args in (("history", "show", "1", "--db", str(db)),
                 ("gate", SAMPLE, "--history", str(db), "--against", "main", "--max-overlap-drop", "1",
                  "--no-config")):
        code, _, err = cli(*args)
        # Before: show died with ValueError; the gate read 'abc' as NaN and compared with it.
        assert code == 3 and one_line_error(err, "rank_steps.overlap_pct", "'abc'"), err


@pytest.mark.parametrize("column, value", [("overlap_pct", "abc"), ("ranks", "x"), ("steps", ""),
                                           ("exposed_comm_fraction", b"\x00\x01")])
def test_history_runs_with_text_where_numbers_belong(tmp_path, column, value):
    # SQLite keeps text (or a blob) in a REAL or INTEGER column: history list and show died with ValueError
    # ("Unknown format code 'f' for object of type 'str'"). Now one line naming the run and column, exit 3.
    db = tmp_path / "h.db"
    assert cli("history", "add", SAMPLE, "--db", str(db), "--label", "main")[0] == 0
    with sqlite3.connect(db) as conn:
        conn.execute(f"update runs set {column} = ?", (value,))
    conn.close()
    for args in (("history", "list", "--db", str(db)), ("history", "list", "--db", str(db), "--format", "json"),
                 ("history", "show", "1", "--db", str(db))):
        code, _, err = cli(*args)
        assert code == 3 and one_line_error(err, str(db), f"runs.{column}"), err
