"""Every command that prints to a terminal, run as the installed console script inside a real
pseudo-terminal (the standard library's `pty`, window size set with TIOCSWINSZ) at 80 and 120 columns, with
COLUMNS and NO_COLOR removed from the environment: the documented exit code, no traceback, and no line
(ANSI escape sequences stripped) wider than the terminal. click's test runner is not a terminal, so only
these tests see what a user sees. Colour and width switches (NO_COLOR, COLUMNS, --color/--no-color) too."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import signal
import re
import select
import struct
import subprocess
import sys
import termios
import time
import warnings
from pathlib import Path

import pytest

from conftest import ROOT, SAMPLES, corpus_file

TRACELENS = Path(sys.executable).parent / "tracelens"      # the installed console script
WIDTHS = (80, 120)
ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[()][0-9A-Za-z]")
SGR = re.compile(r"\x1b\[[0-9;]*m")                       # colour and bold
BOX = "┃│┏┡└"


def clean_env(extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")}
    env["TERM"] = "xterm-256color"
    env["PATH"] = os.pathsep.join([str(TRACELENS.parent), env.get("PATH", "")])
    return {**env, **(extra or {})}


def in_terminal(args, columns: int, env: dict | None = None, cwd=ROOT, timeout: float = 180) -> tuple[int, str]:
    """Run ``tracelens ARGS`` with stdin, stdout and stderr on a pseudo-terminal ``columns`` wide; return its
    exit code and everything it wrote there."""
    if not TRACELENS.exists():
        pytest.fail(f"the console script is not installed next to {sys.executable} (pip install -e .)")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    proc = subprocess.Popen([str(TRACELENS), *map(str, args)], stdin=slave, stdout=slave, stderr=slave,
                            env=clean_env(env), cwd=cwd, start_new_session=True)
    os.close(slave)
    chunks, deadline = [], time.monotonic() + timeout
    try:
        while True:
            ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
            if not ready:
                proc.kill()
                pytest.fail(f"tracelens {' '.join(map(str, args))} did not finish in {timeout} s")
            try:
                data = os.read(master, 65536)
            except OSError:          # EIO: the last writer closed the terminal
                break
            if not data:
                break
            chunks.append(data)
    finally:
        os.close(master)
    code = proc.wait(timeout=30)
    return code, b"".join(chunks).decode("utf-8", "replace")


def lines_of(out: str) -> list[str]:
    """What the terminal shows, line by line: escapes stripped, split at every line feed and carriage
    return (a progress bar redraws its line with carriage returns)."""
    return re.split(r"\r\n|\r|\n", ESCAPE.sub("", out))


def assert_fits(code: int, out: str, columns: int, expected_code: int = 0) -> list[str]:
    assert "Traceback" not in out, out[-3000:]
    assert code == expected_code, out[-3000:]
    lines = lines_of(out)
    wide = [line for line in lines if len(line) > columns]
    assert not wide, f"{len(wide)} line(s) wider than {columns} columns:\n" + "\n".join(wide)
    return lines


def report_json(path) -> dict:
    proc = subprocess.run([str(TRACELENS), "report", str(path), "--format", "json"], capture_output=True,
                          text=True, env=clean_env(), cwd=ROOT, timeout=180)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def assert_step_rows_intact(lines: list[str], rep: dict) -> None:
    """Every step row of every rank is on one line with all seven millisecond cells whole: the same number
    of decimals in each, and each equal to the JSON report's value (ns / 1e6) rounded to that many."""
    rows = [re.sub(f"[{BOX}]", " ", line).split() for line in lines]
    keys = ("duration_ns", "compute_ns", "comm_ns", "overlap_ns", "exposed_comm_ns", "idle_ns", "copy_ns")
    for r in rep["ranks"]:
        title = next(i for i, line in enumerate(lines) if line.startswith(f"rank {r['rank']}/")
                     or line.startswith(f"rank {r['rank']} "))
        for st in r["steps"] + [dict(r["totals"], step="total")]:
            label = "all" if st["step"] is None else str(st["step"])
            row = next(cells for cells in rows[title + 1:] if cells[:1] == [label])
            cells = row[1:8] if st.get("complete", True) else row[2:9]
            decimals = {len(c.split(".")[1]) if "." in c else 0 for c in cells}
            assert len(decimals) == 1, row
            (d,) = decimals
            assert [float(c.replace(",", "")) for c in cells] == [round(st[k] / 1e6, d) for k in keys], row


# --------------------------------------------------------------------------- report

REPORT_INPUTS = {
    "wfbp_100": SAMPLES / "wfbp_100",                 # `make demo`
    "straggler": SAMPLES / "straggler",               # four ranks
    "cuda_nccl_item": SAMPLES / "cuda_nccl_item",     # a real H100 recording, long diagnosis text
    "gloo_sawtooth": SAMPLES / "gloo_sawtooth",       # a real CPU recording
    "cuda_nccl_ddp": SAMPLES / "cuda_nccl_ddp",       # a real H100 recording with a pre-capture line
}


@pytest.mark.parametrize("columns", WIDTHS)
@pytest.mark.parametrize("name", sorted(REPORT_INPUTS))
def test_report_fits_the_terminal(name, columns):
    code, out = in_terminal(["report", REPORT_INPUTS[name]], columns)
    lines = assert_fits(code, out, columns)
    rep = report_json(REPORT_INPUTS[name])
    assert_step_rows_intact(lines, rep)
    assert any(line.startswith("summary: ") for line in lines)
    # One pre-capture line per rank that has such work (the line's own content: tests/test_renderers.py).
    assert sum(line.startswith("pre-capture (") for line in lines) == sum(bool(r["pre_capture"]) for r in rep["ranks"])
    # The roomy layout (boxed tables) from 120 columns on; at 80 the tables drop the box.
    assert any(ch in out for ch in BOX) == (columns >= 120)


@pytest.mark.parametrize("columns", WIDTHS)
def test_report_of_nccl_logs_alone_fits_the_terminal(columns):
    # The corpus folder of NCCL logs, no trace: the transport's finding and its details wrap at the width.
    folder = corpus_file("nccl_logs/issue_nccl952_ib_nodevice_p2pipc_plus_socket.log").parent
    code, out = in_terminal(["report", folder], columns)
    lines = assert_fits(code, out, columns)
    joined = " ".join(line.strip() for line in lines)
    assert " · whole run · network transport: " in joined and " lines quoted from " in joined
    assert "summary: no traces; the network transport from NCCL logs alone" in lines


def test_make_demo_command_at_80_columns():
    # The Quickstart's `make demo` runs `$(BIN)/tracelens report ...`: the same command, in an 80-column terminal
    # (its other lines echo how to open the dashboard, and fit 80 columns too).
    recipe = (ROOT / "Makefile").read_text().split("\ndemo:")[1].split("\n\n")[0]
    (command,) = [line.strip() for line in recipe.splitlines() if line.strip().startswith("$(BIN)/tracelens ")]
    echoed = [line.strip() for line in recipe.splitlines() if line.strip().startswith("@echo")]
    assert any("tracelens dashboard" in line for line in echoed)
    assert all(len(line.replace("$(BIN)", ".venv/bin")) - len('@echo ""') <= 80 for line in echoed)
    args = command.split()
    assert args[0] == "$(BIN)/tracelens", command
    code, out = in_terminal(args[1:], 80)
    lines = assert_fits(code, out, 80)
    assert any(line.startswith("summary: ") for line in lines)


@pytest.mark.parametrize("columns", WIDTHS)
def test_report_of_a_corpus_trace_with_long_kernel_names(columns):
    path = corpus_file("hta/negative_queue_length_values_check/rank0.json.gz")
    code, out = in_terminal(["report", path], columns)
    lines = assert_fits(code, out, columns)
    assert_step_rows_intact(lines, report_json(path))
    # 19 distinct (kernel, op, size) collectives with exposed time on this rank: --top 10 of them, a row each;
    # their SendRecv kernel names are longer than the room left: cut with an ellipsis.
    head = lines.index("most exposed collectives")
    rows = [re.sub(f"[{BOX}]", " ", line).strip() for line in lines[head + 1:head + 20]]
    rows = [row for row in rows if row.startswith("0 ")]
    assert len(rows) == 10 and all("ncclKernel_SendRecv" in row and row.endswith("…") for row in rows), rows


def test_most_exposed_collectives_are_grouped():
    # wfbp_100 truth per rank: 100 identical 25 MiB all-reduces a step, 3 steps; 2.1 ms exposed per step
    # in 0.12 ms kernels -> 17 fully exposed + one 0.06 ms part = 18 exposed a step, 54 of 300, 6.3 ms.
    code, out = in_terminal(["report", SAMPLES / "wfbp_100"], 80)
    lines = assert_fits(code, out, 80)
    head = lines.index("most exposed collectives")
    rows = [line.split() for line in lines[head + 4:head + 6]]
    assert [row[:9] for row in rows] == [
        ["0", "all_reduce", "25.0", "MiB", "54", "of", "300", "6.300", "0.120"],
        ["1", "all_reduce", "25.0", "MiB", "54", "of", "300", "6.300", "0.120"]]
    # One row per rank, not ten identical ones; the cross-rank tables follow.
    assert lines[head + 6].startswith("across ranks")


@pytest.mark.parametrize("columns", WIDTHS)
def test_exposed_communication_by_parallelism(columns, tmp_path):
    from fixtures.synth import layout
    # Unnamed groups; a MoE dispatcher's range around each all-to-all says it is expert parallel.
    layout.write(tmp_path, named=False, a2a_scope="MoEAlltoAllTokenDispatcher.token_permutation")
    code, out = in_terminal(["report", tmp_path], columns)
    lines = assert_fits(code, out, columns)
    head = lines.index("exposed communication by parallelism")
    rows = [re.sub(f"[{BOX}]", " ", line).split() for line in lines[head + 1:head + 12]]
    truth = layout.truth()
    # Each dimension's row, most exposed first: 8 ranks x 2 steps of the generator's per-step exposure
    # (pp 1.1 ms, dp 0.8, tp 0.7, ep 0.4, unknown 0 per step); worst rank 0 on the tie.
    got = [r[:4] for r in rows if r and r[0] in truth]
    assert got == [[d, "8", f"{16 * truth[d]['comm_ns'] / 1e6:.3f}", f"{16 * truth[d]['exposed_comm_ns'] / 1e6:.3f}"]
                   for d in ("pp", "dp", "tp", "ep", "unknown")]
    # The verdict opens the report: each 10.3 ms step exposes 2.3 ms of transfers (no rank waits for another:
    # every rank runs the same plan), 2.3 / 10.3 = 22 %.
    at = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert at < next(i for i, line in enumerate(lines) if line.startswith("rank 0/8"))
    top = " ".join(" ".join(lines[at:at + 2]).split())
    assert top.startswith("verdict: Transfers that no compute hides cost 2.300 ms per step (22.3 % of the step)"), top


# --------------------------------------------------------------------------- gate, history, export


@pytest.mark.parametrize("columns", WIDTHS)
def test_gate_pass_and_fail(columns):
    code, out = in_terminal(["gate", SAMPLES / "wfbp_100", "--no-config", "--min-overlap-pct", "50",
                             "--no-critical"], columns)
    assert_fits(code, out, columns, expected_code=0)
    assert "gate: passed (2 rules)" in ESCAPE.sub("", out)
    # one_bucket: two-phase, nothing hidden -> every rule fails, with long messages that must wrap.
    code, out = in_terminal(["gate", SAMPLES / "one_bucket", "--no-config", "--min-overlap-pct", "50",
                             "--no-critical", "--require-pattern", "sawtooth", "--max-exposed-fraction", "0.1"],
                            columns)
    assert_fits(code, out, columns, expected_code=1)
    assert "FAILED (4 of 4 rules)" in ESCAPE.sub("", out)


@pytest.mark.parametrize("columns", WIDTHS)
def test_history_add_list_show(columns, tmp_path):
    db = tmp_path / "ci-history.db"
    code, out = in_terminal(["history", "add", SAMPLES / "wfbp_100", "--db", db, "--label",
                             "feature/a-rather-long-branch-name", "--commit", "0123456789abcdef" * 2], columns)
    assert_fits(code, out, columns)
    code, out = in_terminal(["history", "add", SAMPLES / "one_bucket", "--db", db, "--label", "main"], columns)
    assert_fits(code, out, columns)
    code, out = in_terminal(["history", "list", "--db", db], columns)
    lines = assert_fits(code, out, columns)
    assert sum(bool(re.match(r"^\W*[12]\W", line)) for line in lines) == 2          # both runs listed
    code, out = in_terminal(["history", "show", "1", "--db", db], columns)
    lines = assert_fits(code, out, columns)
    # 2 ranks x 3 steps, each row whole: rank, step, three ms cells as the generator wrote them.
    rows = [re.sub(f"[{BOX}]", " ", line).split() for line in lines]
    steps = [row for row in rows if len(row) >= 3 and row[0] in "01" and row[1] in ("2", "3", "4")]
    assert len(steps) == 6 and all(row[2:5] == ["16.470", "12.000", "2.100"] for row in steps), steps


@pytest.mark.parametrize("columns", WIDTHS)
def test_export(columns, tmp_path):
    code, out = in_terminal(["export", SAMPLES / "wfbp_100", "-o", "tables"], columns, cwd=tmp_path)
    lines = assert_fits(code, out, columns)
    assert "tables/device_ops.parquet" in lines and (tmp_path / "tables" / "device_ops.parquet").is_file()


@pytest.mark.parametrize("columns", WIDTHS)
def test_annotate(columns, tmp_path):
    # straggler: 4 ranks, one annotated trace each, every path on a line of its own within the width (after
    # the progress bar of its report, which fits too); a second run into the same folder is refused (exit 2)
    # with the one-line error every command gives.
    code, out = in_terminal(["annotate", SAMPLES / "straggler", "-o", "annotated"], columns, cwd=tmp_path)
    lines = [line for line in assert_fits(code, out, columns) if line.strip()]
    assert lines[-4:] == [f"annotated/rank{r}.tracelens.json.gz" for r in range(4)]
    assert all(line.startswith("reading ") for line in lines[:-4])
    assert all((tmp_path / "annotated" / f"rank{r}.tracelens.json.gz").is_file() for r in range(4))
    code, out = in_terminal(["annotate", SAMPLES / "straggler", "-o", "annotated"], columns, cwd=tmp_path)
    assert code == 2 and "Traceback" not in out
    assert [line for line in lines_of(out) if line] == [
        "tracelens: error: annotated: output folder holds annotated traces (rank0.tracelens.json.gz, "
        "rank1.tracelens.json.gz, rank2.tracelens.json.gz, rank3.tracelens.json.gz): use --force to overwrite them"]


# --------------------------------------------------------------------------- collect's closing summary


@pytest.mark.parametrize("columns", WIDTHS)
def test_collect_summary_of_a_job_without_traces(columns, tmp_path):
    # The job never imports torch, so nothing is recorded: the long warning wraps, exit code 4.
    code, out = in_terminal(["collect", "--out", "run", "--", sys.executable, "-c", "print('job ran')"], columns,
                            cwd=tmp_path)
    lines = assert_fits(code, out, columns, expected_code=4)
    assert "job ran" in lines and any("no rank wrote a trace" in line for line in lines)


FAKE_NSYS = r'''#!{python}
"""Nsight Systems stand-in: `profile` runs the command and leaves a report; `export` copies the
generator's SQLite export of wfbp_100 rank 0."""
import os, shutil, subprocess, sys
args = sys.argv[1:]
if args[0] == "profile":
    out = args[args.index("-o") + 1]
    code = subprocess.call(args[args.index("-o") + 2:])
    open(out + ".nsys-rep", "wb").write(b"fake")
    sys.exit(code)
shutil.copy(os.environ["FAKE_NSYS_EXPORT"], args[args.index("--output") + 1])
'''


@pytest.mark.parametrize("columns", WIDTHS)
def test_collect_summary_and_report_in_a_terminal(columns, tmp_path):
    from fixtures import synth

    bindir = tmp_path / "bin"
    bindir.mkdir()
    (bindir / "nsys").write_text(FAKE_NSYS.format(python=sys.executable))
    (bindir / "nsys").chmod(0o755)
    synth.write_nsys(synth.SCENARIOS["wfbp_100"], tmp_path / "exports", per_rank=True)
    env = {"PATH": f"{bindir}{os.pathsep}{clean_env()['PATH']}", "FAKE_NSYS_EXPORT":
           str(tmp_path / "exports" / "rank0.sqlite"), "TRACELENS_NSYS": str(bindir / "nsys")}
    code, out = in_terminal(["collect", "--profiler", "nsys", "--out", "run", "--", sys.executable, "-c",
                             "print('job ran')"], columns, env=env, cwd=tmp_path)
    lines = assert_fits(code, out, columns)
    assert any(line.startswith("tracelens: job exited with 0; traces for 1 of 1 rank(s)") for line in lines)
    assert_step_rows_intact(lines, json.loads((tmp_path / "run" / "report.json").read_text()))


JOB_EXIT = re.compile(r"tracelens: job exited with (\d+)")


@pytest.mark.e2e
@pytest.mark.parametrize("columns", (80,))
def test_collect_of_a_real_gloo_job_in_a_terminal(columns, tmp_path):
    from conftest import TRAIN, needs_torch

    needs_torch()
    failures = []
    for attempt in (1, 2):
        run = tmp_path / f"attempt{attempt}"
        run.mkdir()
        code, out = in_terminal(["collect", "--out", "run", "--steps", "1,1,3", "--", "torchrun",
                                 "--nproc-per-node", "2", TRAIN, "--backend", "gloo", "--bucket-cap-mb", "0.25",
                                 "--steps", "7"], columns, env={"OMP_NUM_THREADS": "1"}, cwd=run, timeout=300)
        lines = lines_of(out)
        end = next((i for i, line in enumerate(lines) if JOB_EXIT.match(line)), None)
        assert end is not None, out[-3000:]
        if JOB_EXIT.match(lines[end]).group(1) == "0":
            break
        # The training job itself failed (once in a CI run, never here in 40 runs of it): that is the job's
        # failure, not tracelens's, so it is run once more; its output says why, and a second failure fails.
        manifest = run / "run" / "manifest.json"
        ranks = json.loads(manifest.read_text())["ranks"] if manifest.exists() else "no manifest"
        failures.append(f"attempt {attempt}: exit code {code}; the job's output:\n"
                        + "\n".join(lines[:end + 1])[-6000:] + f"\nranks in the manifest: {ranks}")
    else:
        pytest.fail("\n\n".join(failures))
    if failures:
        warnings.warn("the gloo job failed once, then ran: " + failures[0])
    # The job's own output (torch's profiler notes, torchrun's) is not tracelens's to fit: check from the
    # closing summary on, and every tracelens line before it.
    ours = [line for line in lines[:end] if line.startswith("tracelens:")] + lines[end:]
    assert_fits(code, "\n".join(ours), columns)
    assert any(line.startswith("summary: 2 rank(s), 3 step(s)") for line in ours)
    assert_step_rows_intact(ours, json.loads((run / "run" / "report.json").read_text()))


@pytest.mark.parametrize("command", ["", "report", "collect", "export", "annotate", "gate", "history", "history add",
                                     "history list", "history show"])
def test_help_fits_80_columns(command):
    code, out = in_terminal([*command.split(), "--help"], 80)
    assert_fits(code, out, 80)


# Issue 46, item 14: in a terminal too (where click may colour and restyle what it prints), a usage error is
# one line of ours, never click's four-line usage block; every case of each kind: tests/cli/test_usage_errors.py.
@pytest.mark.parametrize("args, line", [
    (["report", "sample_traces/wfbp_100", "--format", "xml"],
     "tracelens: error: report: invalid value for '--format': 'xml' is not one of 'text', 'json', 'markdown', "
     "'html'; see 'tracelens report --help'"),
    (["diff", "sample_traces/wfbp_100"],
     "tracelens: error: diff: missing argument 'AFTER'; see 'tracelens diff --help'"),
    (["gate", "sample_traces/wfbp_100", "--bogus"],
     "tracelens: error: gate: no such option '--bogus'; see 'tracelens gate --help'"),
    (["dashboard", "sample_traces/wfbp_100", "--port", "abc"],
     "tracelens: error: dashboard: invalid value for '--port': 'abc' is not a valid integer (0<=x<=65535); see "
     "'tracelens dashboard --help'"),
    (["history", "bogus"],
     "tracelens: error: history: no such command 'bogus' (commands: add, list, show); see 'tracelens history --help'"),
], ids=["bad choice", "missing argument", "unknown option", "bad int", "unknown command"])
def test_a_usage_error_in_a_terminal_is_one_line(args, line):
    code, out = in_terminal(args, 80)
    assert code == 2 and [text for text in lines_of(out) if text] == [line], out


# --------------------------------------------------------------------------- colour and width switches


def test_no_color_means_no_escape_codes():
    code, out = in_terminal(["report", SAMPLES / "wfbp_100"], 120)
    assert code == 0 and SGR.search(out)                              # a terminal gets colour by default
    code, out = in_terminal(["report", SAMPLES / "wfbp_100"], 120, env={"NO_COLOR": "1"})
    assert code == 0 and not SGR.search(out), SGR.findall(out)[:5]
    code, out = in_terminal(["gate", SAMPLES / "one_bucket", "--no-config", "--no-critical"], 120,
                            env={"NO_COLOR": "1"})
    assert code == 1 and "FAIL" in out and not SGR.search(out)


def test_no_color_flag_in_a_terminal():
    for args in (["report", SAMPLES / "wfbp_100"], ["gate", SAMPLES / "one_bucket", "--no-config", "--no-critical"]):
        code, out = in_terminal([*args, "--no-color"], 120)
        assert code in (0, 1) and not SGR.search(out), SGR.findall(out)[:5]


def test_color_flag_forces_colour_into_a_pipe():
    for args, expected in ((["report", SAMPLES / "wfbp_100"], 0),
                           (["gate", SAMPLES / "one_bucket", "--no-config", "--no-critical"], 1)):
        plain = subprocess.run([str(TRACELENS), *map(str, args)], capture_output=True, text=True,
                               env=clean_env(), cwd=ROOT)
        forced = subprocess.run([str(TRACELENS), *map(str, args), "--color"], capture_output=True, text=True,
                                env=clean_env({"NO_COLOR": "1"}), cwd=ROOT)    # the flag beats NO_COLOR
        assert (plain.returncode, forced.returncode) == (expected, expected)
        assert not SGR.search(plain.stdout) and SGR.search(forced.stdout)
        assert ESCAPE.sub("", forced.stdout) == plain.stdout


def test_columns_is_honoured_in_a_terminal_and_in_a_pipe():
    # A 120-column terminal told COLUMNS=80 lays out for 80: no boxed tables, nothing wider.
    code, out = in_terminal(["report", SAMPLES / "wfbp_100"], 120, env={"COLUMNS": "80"})
    lines = assert_fits(code, out, 80)
    assert not any(ch in out for ch in BOX)
    assert_step_rows_intact(lines, report_json(SAMPLES / "wfbp_100"))
    piped = subprocess.run([str(TRACELENS), "report", str(SAMPLES / "wfbp_100")], capture_output=True, text=True,
                           env=clean_env({"COLUMNS": "80"}), cwd=ROOT)
    assert piped.returncode == 0 and max(map(len, piped.stdout.splitlines())) <= 80
    # Without COLUMNS a pipe gets the roomy layout (160 columns, one-line headers).
    wide = subprocess.run([str(TRACELENS), "report", str(SAMPLES / "wfbp_100")], capture_output=True, text=True,
                          env=clean_env(), cwd=ROOT)
    assert "exposed comm ms" in wide.stdout and max(map(len, wide.stdout.splitlines())) > 120


def test_progress_counts_files_ranks_and_bytes_on_a_terminal_only():
    # straggler: four rank files (one rank each), their sizes on disk summed for the bytes column.
    run = SAMPLES / "straggler"
    files = sorted(run.glob("*.json*"))
    code, out = in_terminal(["report", run, "--no-cache"], 120)      # read, not served whole from the cache
    lines = assert_fits(code, out, 120)
    total = sum(f.stat().st_size for f in files) / 2**20
    assert any(f"{len(files)}/{len(files)} files" in line and f"{len(files)} ranks" in line
               and f"/{total:,.1f} MiB" in line for line in lines), out[-2000:]
    # JSON output and a pipe are quiet: nothing but the report.
    code, out = in_terminal(["report", run, "--format", "json"], 120)
    assert code == 0 and " files" not in ESCAPE.sub("", out).split("{", 1)[0]
    proc = subprocess.run([str(TRACELENS), "report", str(run)], capture_output=True, text=True, env=clean_env(),
                          cwd=ROOT, timeout=180)
    assert proc.returncode == 0 and proc.stderr == ""


def test_ctrl_c_during_a_report_with_decode_workers(tmp_path):
    """Ctrl-C in a terminal reaches the whole foreground process group: tracelens and its forked decode
    workers. tracelens ends with 130 and one line, no traceback from it or a worker, and no worker outlives it."""
    src = corpus_file("hta/trace_filter/sampled_rank-0.json.gz")     # 1.8 MB of JSON: ~25 ms a decode
    run = tmp_path / "run"
    run.mkdir()
    data = src.read_bytes()                       # 0.12 MB gzipped; copies, since a file linked twice is read once
    for r in range(120):
        (run / f"rank{r:03d}.json.gz").write_bytes(data)
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([str(TRACELENS), "report", str(run), "--no-cache"], stdin=slave, stdout=slave,
                            stderr=slave, env=clean_env(), cwd=ROOT, start_new_session=True)
    os.close(slave)
    out, deadline = b"", time.monotonic() + 60
    try:
        while b"files" not in out:                  # the progress bar: several files are being read
            ready, _, _ = select.select([master], [], [], max(deadline - time.monotonic(), 0))
            assert ready, f"no progress after 60 s: {out[-500:]!r}"
            out += os.read(master, 65536)
        os.killpg(proc.pid, signal.SIGINT)          # what the terminal does on Ctrl-C
        while True:
            ready, _, _ = select.select([master], [], [], 30)
            try:
                data = os.read(master, 65536) if ready else b""
            except OSError:
                break
            if not data:
                break
            out += data
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    assert proc.wait(timeout=30) == 130
    text = out.decode("utf-8", "replace")
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text[-2000:]
    assert text.count("tracelens: aborted") == 1, text[-2000:]     # said once: by tracelens, not by a worker
    time.sleep(0.2)
    with pytest.raises(ProcessLookupError):         # nothing of the group is left: workers ended and reaped
        os.killpg(proc.pid, 0)


def test_the_docs_say_how_tables_take_the_width():
    # docs/report.md, "In a terminal": from 120 columns a table is boxed, with one-line headers where they fit (the step table
    # needs N columns for them), headers over two lines otherwise; below 120, no box. Held against the
    # renderer on wfbp_100 (the step table's header row is the line after the rank's title).
    import tracelens
    from tracelens.renderers import render

    readme = " ".join((ROOT / "docs" / "report.md").read_text(encoding="utf-8").split())
    claim = re.search(r"From 120 columns a table is boxed, with one-line headers where they fit \(the step table "
                      r"needs (\d+) columns for them\) and headers over two lines otherwise; narrower, it loses the "
                      r"box", readme)
    assert claim, "docs/report.md's sentence on table layouts changed: update this test with it"
    needs = int(claim[1])
    rep = tracelens.analyze(tracelens.load(str(SAMPLES / "wfbp_100")))

    def step_table(width):
        lines = render(rep, "text", width=width).splitlines()
        at = next(k for k, line in enumerate(lines) if line.startswith("rank 0/2"))
        boxed = lines[at + 1].startswith("┏")
        return boxed, lines[at + 2].split("┃")[1].strip() if boxed else None    # boxed, first header cell

    assert step_table(119) == (False, None)
    assert step_table(120) == (True, "") and step_table(needs - 1) == (True, "")   # two-line headers: blank first
    assert step_table(needs) == (True, "step") and step_table(160) == (True, "step")


def test_the_readmes_verdict_is_what_a_terminal_shows():
    # README, "The run verdict": the straggler sample's first lines in a terminal of 112 columns, as quoted.
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    block = readme.split("its first lines):\n\n```\n", 1)[1].split("```", 1)[0].splitlines()
    code, out = in_terminal(["report", "sample_traces/straggler", "--no-color"], 112)
    lines = [line.rstrip() for line in lines_of(out)]
    at = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
    assert code == 0 and lines[at:at + len(block)] == block


# --------------------------------------------------------------------------- where steps come from

PARAM_LINEAR = "kineto_misc/param_single_gpu/linear_kineto.json.gz"   # no ProfilerStep: 39 steps inferred


@pytest.mark.parametrize("columns", WIDTHS)
def test_inferred_steps_in_a_terminal(columns, tmp_path):
    path = corpus_file(PARAM_LINEAR)
    code, out = in_terminal(["report", path], columns, env={"TRACELENS_CACHE": str(tmp_path)})
    lines = assert_fits(code, out, columns)
    rep = report_json(path)
    assert rep["ranks"][0]["steps_from"] == "inferred" and len(rep["ranks"][0]["steps"]) == 39
    assert any(line.startswith("rank 0 · GPU 0") and "steps inferred" in line for line in lines)
    assert_step_rows_intact(lines, rep)
    said = " ".join(lines)
    assert "steps-inferred" in said and "39 steps inferred from a cycle of 261 device activities" in " ".join(
        said.split())


def test_steps_from_is_an_option_and_a_cache_key(tmp_path):
    # One cache folder for all three: each choice is its own entry (the analysis key holds it), so a warm
    # report never answers one choice with another's steps.
    env = {"TRACELENS_CACHE": str(tmp_path)}
    path = corpus_file(PARAM_LINEAR)

    def steps(*extra):
        proc = subprocess.run([str(TRACELENS), "report", str(path), "--format", "json", *extra], capture_output=True,
                              text=True, env=clean_env(env), cwd=ROOT, timeout=180)
        assert proc.returncode == 0, proc.stderr
        r = json.loads(proc.stdout)["ranks"][0]
        return r["steps_from"], len(r["steps"])

    for _ in range(2):                       # cold, then warm
        assert steps() == ("inferred", 39)
        assert steps("--steps-from", "whole") == ("whole-capture", 1)
        assert steps("--steps-from", "markers") == ("whole-capture", 1)
    code, out = in_terminal(["report", path, "--steps-from", "sometimes"], 80)
    lines = [line for line in lines_of(out) if line.strip()]
    assert code == 2 and "Traceback" not in out
    assert len(lines) <= 3 and any("sometimes" in line for line in lines), out


# --------------------------------------------------------------------------- long captures

def _long_capture(tmp_path, steps: int):
    import dataclasses

    from fixtures import synth
    from fixtures.findings import write

    return write(dataclasses.replace(synth.SCENARIOS["long_capture"], name=f"long_{steps}", steps=steps), tmp_path)


def _nearest(values, q):
    # The nearest-rank quantile, by hand: sorted, index round(q x (n - 1)).
    values = sorted(values)
    return values[min(len(values) - 1, int(q * (len(values) - 1) + 0.5))]


@pytest.mark.parametrize("columns", WIDTHS)
def test_a_long_capture_shows_the_distribution_and_the_worst_steps(columns, tmp_path):
    path = _long_capture(tmp_path, 55)
    code, out = in_terminal(["report", path], columns)
    lines = assert_fits(code, out, columns)
    rep = report_json(path)
    steps = rep["ranks"][0]["steps"]
    rows = [re.sub(f"[{BOX}]", " ", line).split() for line in lines]
    title = next(i for i, line in enumerate(lines) if line.startswith("rank 0/2"))
    table = rows[title + 1:]
    table = table[:next(i for i, cells in enumerate(table) if cells[:1] == ["total"])]
    # Each quantile row, each time column: the Report's own step values, by hand.
    for label, q in (("min", 0.0), ("median", 0.5), ("p90", 0.9), ("max", 1.0)):
        row = next(cells for cells in table if cells[:1] == [label])
        want = [f"{_nearest([s[k] for s in steps], q) / 1e6:.3f}" for k in ("duration_ns", "compute_ns", "comm_ns")]
        assert row[1:4] == want, (label, row)
    # The 5 steps with the most exposed communication (generator truth: it grows each step, so the last 5),
    # and no other step row.
    shown = [cells[0] for cells in table if cells and cells[0].isdigit()]
    assert shown == ["52", "53", "54", "55", "56"]
    said = " ".join(" ".join(lines).split())
    assert "55 steps: min, median, p90 and max of each column over them, then the 5 with the most exposed " \
           "communication (--steps all: every step)" in said


def test_fifty_steps_are_all_shown_and_steps_all_shows_every_row(tmp_path):
    code, out = in_terminal(["report", _long_capture(tmp_path / "a", 50)], 120)
    lines = assert_fits(code, out, 120)
    assert not any(re.sub(f"[{BOX}]", " ", line).split()[:1] == ["median"] for line in lines)
    assert "--steps all: every step" not in out
    path = _long_capture(tmp_path / "b", 55)
    code, out = in_terminal(["report", path, "--steps", "all"], 120)
    lines = assert_fits(code, out, 120)
    assert_step_rows_intact(lines, report_json(path))            # every one of the 55 rows, whole
    assert "--steps all: every step" not in out


def test_a_warm_report_in_a_terminal_prints_what_a_cold_one_prints(tmp_path):
    """In a terminal (colour on, the window's width): the second report of the same inputs prints its kept
    rendering, byte for byte the first's; the same inputs in a narrower window are rendered afresh, as a
    report without the cache renders them there."""
    env = {"TRACELENS_CACHE": str(tmp_path / "cache")}
    path = REPORT_INPUTS["straggler"]

    def report(*args, columns=120):
        code, out = in_terminal(["report", path, *args], columns, env)
        assert code == 0
        # What follows the progress bar (shown while files are read, then erased).
        return out[out.index("\x1b[1mverdict"):]
    first = report()
    assert SGR.search(first) and "Rank 3 arrives last" in first
    assert report() == first
    assert len(list((tmp_path / "cache" / "renders").glob("*.tlc"))) == 1
    narrow = report(columns=80)
    assert narrow == report("--no-cache", columns=80) and narrow != first
    assert len(list((tmp_path / "cache" / "renders").glob("*.tlc"))) == 2


@pytest.mark.parametrize("columns", WIDTHS)
def test_diff_in_a_terminal(columns):
    """`tracelens diff` of the real re-run (the 40 ms slow rank removed) fits the terminal, answers first."""
    rec = ROOT / "tests" / "fixtures" / "recordings"
    code, out = in_terminal(["diff", rec / "gloo_slow40", rec / "gloo_baseline"], columns)
    lines = [line for line in assert_fits(code, out, columns) if line.strip()]
    first = next(i for i, line in enumerate(lines) if line.startswith("diff: "))
    assert lines[first].startswith("diff: The step got faster by ")
    assert not any("peer-wait" in line for line in lines[:first])                       # the answer first
    assert any("peer-wait" in line for line in lines) and any("no compute or communica" in line for line in lines)
