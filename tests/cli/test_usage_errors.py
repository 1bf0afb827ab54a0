"""Every usage error is one line (issue 46, item 14; docs/errors.md): ``tracelens: error: <command>: <what is
wrong>; see 'tracelens <command> --help'``, exit 2, with the valid choices where there are some. click's own
answer was a four-line usage block (usage, a pointer to --help, a blank line, the error) on every command.
Run through the installed console script with pipes, and with stdin closed (a CI step, a cron job); the
pseudo-terminal case is in test_terminal.py."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import SAMPLES

TRACELENS = str(Path(sys.executable).with_name("tracelens"))
SAMPLE = str(SAMPLES / "wfbp_100")
STEPS_FROM = "'auto', 'markers', 'inferred', 'whole'"

# (arguments, the command the line names, words it must hold besides). Every subcommand: an unknown
# option, a missing argument, a bad choice (the choices named), a number that is not one (its range named).
CASES = [
    (["report", SAMPLE, "--format", "xml"], "report", ["'xml' is not one of 'text', 'json', 'markdown', 'html'"]),
    (["report"], "report", ["missing argument 'PATHS...'"]),
    (["report", SAMPLE, "--bogus"], "report", ["no such option '--bogus'"]),
    (["report", SAMPLE, "--top", "abc"], "report", ["'--top'", "'abc' is not a valid integer (x>=0)"]),
    (["report", SAMPLE, "--top", "-1"], "report", ["-1 is not in the range x>=0"]),
    (["report", SAMPLE, "--rank", "x"], "report", ["'x' is not a valid integer"]),
    (["report", SAMPLE, "--workers", "0"], "report", ["0 is not in the range x>=1"]),
    (["report", SAMPLE, "--format"], "report", ["option '--format' requires an argument"]),
    (["report", SAMPLE, "--formt", "json"], "report", ["no such option '--formt'", "'--format'"]),
    (["export", SAMPLE], "export", ["missing option '-o' / '--output'"]),
    (["export", "--bogus"], "export", ["no such option '--bogus'"]),
    (["annotate", SAMPLE, "-o", "x", "--steps-from", "never"], "annotate", [STEPS_FROM]),
    (["annotate"], "annotate", ["missing argument 'PATHS...'"]),
    (["gate", SAMPLE, "--aggregate", "max"], "gate", ["'max' is not one of 'median', 'mean', 'p90', 'worst'"]),
    (["gate", SAMPLE, "--min-overlap-pct", "abc"], "gate", ["'abc' is not a valid float"]),
    (["gate", SAMPLE, "--bogus"], "gate", ["no such option '--bogus'"]),
    (["history", "bogus"], "history", ["no such command 'bogus' (commands: add, list, show)"]),
    (["history", "add"], "history add", ["missing argument 'PATHS...'"]),
    (["history", "add", SAMPLE, "--db"], "history add", ["option '--db' requires an argument"]),
    (["history", "list", "--db", "h.db", "--limit", "0"], "history list", ["0 is not in the range x>=1"]),
    (["history", "list", "--format", "xml"], "history list", ["'xml' is not one of 'text', 'json'"]),
    (["history", "show", "one"], "history show", ["'one' is not a valid integer"]),
    (["collect"], "collect", ["missing argument 'COMMAND...'"]),
    (["collect", "--profiler", "perf", "--", "true"], "collect", ["'perf' is not one of 'torch', 'nsys'"]),
    (["dashboard", SAMPLE, "--port", "abc"], "dashboard", ["'abc' is not a valid integer (0<=x<=65535)"]),
    (["dashboard", SAMPLE, "--port", "99999"], "dashboard", ["99999 is not in the range 0<=x<=65535"]),
    (["dashboard"], "dashboard", ["missing argument"]),
    (["cache", "bogus"], "cache", ["no such command 'bogus' (commands: clear, info)"]),
    (["cache", "info", "--format", "xml"], "cache info", ["'xml' is not one of 'text', 'json'"]),
    (["cache", "clear", "--bogus"], "cache clear", ["no such option '--bogus'"]),
    (["diff", SAMPLE], "diff", ["missing argument 'AFTER'"]),
    (["diff", SAMPLE, SAMPLE, "--format", "html"], "diff", ["'html' is not one of 'text', 'markdown', 'json'"]),
    (["bogus"], "", ["no such command 'bogus' (commands: annotate, cache, collect, dashboard, diff, export, gate, "
                     "history, report)"]),
    (["--bogus"], "", ["no such option '--bogus'"]),
]


def expected_line(command: str) -> tuple[str, str]:
    """How the one line starts and ends for ``command`` ("" for tracelens itself)."""
    return (f"tracelens: error: {command}: " if command else "tracelens: error: ",
            f"; see 'tracelens{' ' + command if command else ''} --help'\n")


def check(err: str, command: str, words: list[str]) -> None:
    head, tail = expected_line(command)
    assert err.count("\n") == 1 and err.startswith(head) and err.endswith(tail), err
    assert all(w in err for w in words), (words, err)
    assert "Usage:" not in err and "Traceback" not in err, err


@pytest.mark.parametrize("args, command, words", CASES, ids=[" ".join(c[0][:1] + c[0][2:]) for c in CASES])
def test_a_usage_error_is_one_line(args, command, words, tmp_path):
    done = subprocess.run([TRACELENS, *args], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**os.environ, "NO_COLOR": "1"})
    assert done.returncode == 2 and done.stdout == "", (done.returncode, done.stdout)
    check(done.stderr, command, words)


@pytest.mark.parametrize("closed", [0, 1], ids=["stdin closed", "stdout closed"])
@pytest.mark.parametrize("args, command, words", [CASES[0], CASES[1], CASES[16]], ids=["choice", "argument", "group"])
def test_a_usage_error_with_a_standard_stream_closed(args, command, words, closed, tmp_path):
    # Python starts with no sys.stdin or sys.stdout for a closed descriptor; with stdout closed the
    # console script's last flush was an AttributeError traceback and exit code 1.
    err = tmp_path / "err"
    with open(err, "w") as fh:
        done = subprocess.run([TRACELENS, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=fh,
                              timeout=60, cwd=tmp_path, env={**os.environ, "NO_COLOR": "1"},
                              preexec_fn=lambda: os.close(closed))
    assert done.returncode == 2
    check(err.read_text(), command, words)


def test_a_group_named_alone_prints_its_help():
    # Not an error to put on one line: `tracelens` or `tracelens history` alone asks what there is.
    for args, usage in ([], "Usage: tracelens [OPTIONS] COMMAND"), (["history"], "Usage: tracelens history"):
        done = subprocess.run([TRACELENS, *args], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith(usage) and "Commands:" in done.stderr, done.stderr
