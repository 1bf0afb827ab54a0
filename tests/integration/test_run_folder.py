"""A run folder is untrusted input (issue 36): no path its manifest names, and no link inside it, makes
tracelens open a file outside it; no manifest field of any type gives a traceback.

The run is the recorded ``cuda_nccl_ddp`` sample (one rank, its manifest and NCCL log). Beside it, outside
the run folder, lies a canary: an NCCL log with a line no other file has. Every file opened is recorded
from Python's audit events (:mod:`fixtures.opens`), so a read through any API counts.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tracelens.cli import main
from tracelens.parsers import manifest_schema, rundir

from conftest import SAMPLES
from fixtures.opens import inside, opened_files

SAMPLE = SAMPLES / "cuda_nccl_ddp"
CANARY = "CANARY-LINE-7f3a"


@pytest.fixture(autouse=True)
def _no_workers(monkeypatch):
    monkeypatch.setenv("TRACELENS_JOBS", "0")       # every read in this process, where the audit hook sees it
    monkeypatch.setenv("NO_COLOR", "1")


@pytest.fixture
def run(tmp_path) -> Path:
    """tmp/run: the sample run; tmp/secret: a canary NCCL log and a trace, outside it."""
    folder = tmp_path / "run"
    shutil.copytree(SAMPLE, folder)
    secret = tmp_path / "secret"
    secret.mkdir()
    log = (SAMPLE / "nccl" / "vm.474.log").read_text()
    (secret / "canary.log").write_text(log + f"vm:474:474 [0] NCCL INFO {CANARY}\n")
    shutil.copy(SAMPLES / "wfbp_100" / "rank1.json.gz", secret / "trace.json.gz")
    return folder


def manifest(folder: Path) -> dict:
    return json.loads((folder / "manifest.json").read_text())


def write_manifest(folder: Path, doc) -> None:
    (folder / "manifest.json").write_text(json.dumps(doc))


def report(capsys, *paths) -> tuple[int, dict | None, str, list[str]]:
    with opened_files() as opened:
        code = main(["report", "--no-cache", "--format", "json", *map(str, paths)])
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    return code, json.loads(out.out) if code == 0 else None, out.err, opened


def warning(rep: dict, code: str) -> dict | None:
    return next((w for w in rep["warnings"] if w["code"] == code), None)


# The inputs without the manifest's word on the NCCL log: the folder's walk finds the log by its content.
WALKED = [("kineto", "rank0.pt.trace.json.gz", "distributedInfo"), ("nccl-log", "vm.474.log", "none")]


def listed(rep: dict) -> list[tuple]:
    return [(i["format"], Path(i["path"]).name, i["rank_rule"]) for i in rep["inputs"]]


def _log_outside(run: Path, how: str) -> str:
    """Make the manifest name the canary log ``how``; returns what it names."""
    doc = manifest(run)
    secret = run.parent / "secret" / "canary.log"
    if how == "relative":
        named = "../secret/canary.log"
    elif how == "absolute":
        named = str(secret)
    else:       # a link inside the run folder's own nccl/ that leads to the canary
        (run / "nccl" / "link.log").symlink_to(os.path.relpath(secret, run / "nccl"))
        named = "nccl/link.log"
    doc["ranks"][0]["nccl_log"] = named
    write_manifest(run, doc)
    return named


@pytest.mark.parametrize("how", ["relative", "absolute", "link"])
def test_a_manifest_never_opens_a_log_outside_its_run(run, capsys, how):
    """Before: the canary log was opened, its lines were the transport verdict's evidence, exit 0."""
    named = _log_outside(run, how)
    code, rep, _, opened = report(capsys, run)
    assert code == 0
    assert inside(opened, run.parent / "secret") == []
    assert CANARY not in json.dumps(rep) and "secret" not in json.dumps(rep["inputs"])
    w = warning(rep, "outside-run-folder")
    # one refused path: the manifest's, and for the link also the link itself, found by the folder's walk
    assert w is not None and w["count"] == (2 if how == "link" else 1) and w["rank"] is None
    assert f"ranks[0].nccl_log = {json.dumps(named)}" in w["message"]
    # the run's own log is still read, found in its nccl/ folder by its content, with no rank to give it
    assert listed(rep) == WALKED


def test_the_log_inside_the_run_is_still_read(run, capsys):
    code, rep, _, opened = report(capsys, run)
    assert code == 0 and warning(rep, "outside-run-folder") is None
    assert listed(rep) == [WALKED[0], ("nccl-log", "vm.474.log", "manifest")]      # the manifest's, for rank 0
    assert inside(opened, run / "nccl")


def test_a_manifest_that_is_a_link_outside_is_not_read(run, capsys):
    """manifest.json itself a link to a manifest elsewhere (which names the canary): neither is opened."""
    doc = manifest(run)
    doc["ranks"][0]["nccl_log"] = "canary.log"
    write_manifest(run.parent / "secret", doc)
    (run / "manifest.json").unlink()
    (run / "manifest.json").symlink_to("../secret/manifest.json")
    code, rep, _, opened = report(capsys, run)
    assert code == 0 and inside(opened, run.parent / "secret") == []
    w = warning(rep, "outside-run-folder")
    assert w["count"] == 1 and f"{run}/manifest.json: a link to ../secret/manifest.json" in w["message"]
    assert listed(rep) == WALKED


def test_a_linked_trace_outside_the_folder_is_left_out(run, capsys):
    """The decision (docs/errors.md): a link found in a folder given as input that leads outside it is not
    followed, a file or a folder; named on the command line, the same file is read."""
    (run / "rank1.pt.trace.json.gz").symlink_to("../secret/trace.json.gz")
    (run / "more").symlink_to("../secret", target_is_directory=True)
    code, rep, _, opened = report(capsys, run)
    assert code == 0 and inside(opened, run.parent / "secret") == []
    assert [r["rank"] for r in rep["ranks"]] == [0]
    w = warning(rep, "outside-run-folder")
    assert w["count"] == 2
    assert f"{run}/rank1.pt.trace.json.gz: a link to ../secret/trace.json.gz" in w["message"]
    assert f"{run}/more: a link to ../secret" in w["message"]
    # Named on the command line: the user's choice, read as always (wfbp_100's rank 1 of 2).
    code, rep, _, opened = report(capsys, run / "rank1.pt.trace.json.gz")
    assert code == 0 and [(r["rank"], r["world_size"]) for r in rep["ranks"]] == [(1, 2)]
    assert inside(opened, run.parent / "secret")


def test_a_folder_of_links_only_says_why_it_has_no_trace(tmp_path, run, capsys):
    only = tmp_path / "links"
    only.mkdir()
    (only / "rank0.json.gz").symlink_to("../secret/trace.json.gz")
    code, _, err, opened = report(capsys, only)
    assert code == 2 and err.count("\n") == 1 and inside(opened, tmp_path / "secret") == []
    assert "left out 1 link that leads outside the folder" in err and "name a file on the command line" in err


def test_a_log_named_on_the_command_line_is_the_users_choice(run, capsys):
    code, rep, _, opened = report(capsys, run, run.parent / "secret" / "canary.log")
    assert code == 0 and inside(opened, run.parent / "secret")
    assert ("nccl-log", "canary.log", "none") in listed(rep) and warning(rep, "outside-run-folder") is None


# ------------------------------------------------------------------------------- fields of the wrong type

def test_the_issues_manifests_give_a_warning_not_a_traceback(run, capsys):
    """Before: world_size as a word was dropped silently; ranks as strings were an AttributeError."""
    doc = manifest(run)
    doc["world_size"] = "eight"
    write_manifest(run, doc)
    code, rep, _, _ = report(capsys, run)
    w = warning(rep, "manifest-wrong-type")
    assert code == 0 and w["count"] == 1 and "world_size (expected `int | null`, got `str`)" in w["message"]
    doc["world_size"], doc["ranks"] = 1, ["0", "1"]
    write_manifest(run, doc)
    code, rep, _, _ = report(capsys, run)
    w = warning(rep, "manifest-wrong-type")
    assert code == 0 and w["count"] == 2
    assert "ranks[0] (expected `object`, got `str`), ranks[1] (expected `object`, got `str`)" in w["message"]
    # the rank's entry is gone, so is its NCCL log's rank; the trace is reported as before
    assert listed(rep) == WALKED and [r["rank"] for r in rep["ranks"]] == [0]


def test_every_field_of_the_wrong_kind(run, capsys):
    """Every field replaced by a list of strings, the rank entry's fields too: each field tracelens reads is
    named, the rest is skipped unread (schema: not a tracelens manifest any more, so nothing is read)."""
    doc = manifest(run)
    entry = {k: ["x", "y"] for k in doc["ranks"][0]}
    bad = {k: ["x", "y"] for k in doc if k != "schema"}
    write_manifest(run, {**bad, "schema": doc["schema"], "ranks": [entry]})
    code, rep, _, _ = report(capsys, run)
    w = warning(rep, "manifest-wrong-type")
    read = ["world_size", "env", "ranks[0].rank", "ranks[0].env", "ranks[0].nccl_log", "ranks[0].trace",
            "ranks[0].export", "ranks[0].host"]
    # command, argv and nccl_logs are lists of strings: the right kind
    assert code == 0 and w["count"] == len(read)
    named = w["message"].split("read as absent: ", 1)[1]
    assert all(f"{f} (" in named for f in read[:4]) and "and 2 more" in named     # six shown, then a count
    write_manifest(run, {**bad, "schema": ["x", "y"], "ranks": [entry]})
    code, rep, _, _ = report(capsys, run)
    assert code == 0 and warning(rep, "manifest-wrong-type") is None        # not ours: not read at all


VALUES = ["eight", "8", "", 8.5, 8.0, 0, -1, 2**31, 2**70, 1e300, True, False, None, [], ["0", "1"], [1, 2],
          {}, {"a": 1}, {"NCCL_ALGO": "Ring"}, [[["deep"]]], [{"rank": 0}]]
FIELDS = {   # the field and whether a value is of its type (the schema: tracelens/parsers/manifest_schema.py)
    "world_size": lambda v: v is None or type(v) is int and 1 <= v < 2**31,
    "env": lambda v: v is None or isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    "command": lambda v: v is None or isinstance(v, list) and all(isinstance(x, str) for x in v),
    "argv": lambda v: v is None or isinstance(v, list) and all(isinstance(x, str) for x in v),
    "nccl_logs": lambda v: v is None or isinstance(v, list) and all(isinstance(x, str) for x in v),
    "ranks": lambda v: v is None or isinstance(v, list) and all(isinstance(x, dict) for x in v),
    "ranks[0].rank": lambda v: v is None or type(v) is int and 0 <= v < 2**31,
    "ranks[0].env": lambda v: v is None or isinstance(v, dict) and all(isinstance(x, str) for x in v.values()),
    "ranks[0].nccl_log": lambda v: v is None or isinstance(v, str),
    "ranks[0].host": lambda v: v is None or isinstance(v, str),
    "ranks[0].cpus": lambda v: v is None or type(v) is int and 1 <= v < 2**31,
}


@pytest.mark.parametrize("field", FIELDS)
def test_each_field_with_values_of_every_type(field):
    """The reader over every field and value: a value of the wrong type is named and left out, the other
    fields are kept; one of the right type is read as written."""
    for value in VALUES:
        doc = {"schema": "tracelens.manifest/1", "world_size": 2, "env": {"NCCL_ALGO": "Tree"},
               "ranks": [{"rank": 0, "nccl_log": "nccl/a.log"}, {"rank": 1}]}
        if field.startswith("ranks[0]."):
            doc["ranks"][0][field.split(".")[1]] = value
        else:
            doc[field] = value
        m, wrong = manifest_schema.decode(json.dumps(doc).encode())
        named = [name for name, _ in wrong]
        if FIELDS[field](value):
            assert wrong == [], (field, value)
        else:
            assert named and all(n == field or n.startswith(field + ".") or n.startswith(field + "[")
                                 for n in named), (field, value, wrong)
        if field != "world_size":
            assert m.world_size == 2
        if not field.startswith("ranks"):
            assert [r.rank for r in m.ranks] == [0, 1] and m.ranks[0].nccl_log == "nccl/a.log"


@pytest.mark.parametrize("content, why", [
    (b'{"schema": "tracelens.manifest/1", "ranks": [', "input data was truncated"),
    (b'{"schema": "tracelens.manifest/1", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested too deep"),
    (b'{"schema": "tracelens.manifest/1", "env": NaN}', "JSON is malformed"),
    (b"\xff\xfe{}", "JSON is malformed"),
])
def test_a_manifest_that_cannot_be_read_is_one_line_and_exit_3(run, capsys, content, why):
    (run / "manifest.json").write_bytes(content)
    code, _, err, _ = report(capsys, run)
    assert code == 3 and err == f"tracelens: error: {run / 'manifest.json'}: not a readable manifest: " \
                                f"{err.split('manifest: ', 1)[1]}" and err.count("\n") == 1
    assert why in err


def test_a_manifest_that_is_not_a_file_is_never_opened(run, capsys):
    """A FIFO would block the read forever (before: it did, so this runs the console script under a
    timeout); a huge sparse file would fill memory."""
    (run / "manifest.json").unlink()
    os.mkfifo(run / "manifest.json")
    done = subprocess.run([str(Path(sys.executable).with_name("tracelens")), "report", str(run)],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stderr == f"tracelens: error: {run}/manifest.json: not a readable manifest: not a regular file\n"
    (run / "manifest.json").unlink()
    with open(run / "manifest.json", "wb") as fh:
        fh.truncate(rundir.MANIFEST_MAX_BYTES + 1)
    code, _, err, opened = report(capsys, run)
    assert code == 3 and err.endswith("manifest.json: not a readable manifest: larger than 64 MiB\n")


def test_another_programs_manifest_is_not_read(run, capsys):
    for doc in ([1, 2], {"name": "webapp", "icons": []}, None, "tracelens.manifest/1"):
        write_manifest(run, doc)
        code, rep, _, _ = report(capsys, run)
        assert code == 0 and listed(rep) == WALKED
        assert not [w for w in rep["warnings"] if w["code"].startswith("manifest")]
