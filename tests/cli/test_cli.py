"""The command line: formats, output files, exit codes, one-line errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tracelens.cli import main

from conftest import SAMPLES

SAMPLE = str(SAMPLES / "wfbp_100")


def run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_report_text(capsys):
    code, out, err = run(capsys, "report", SAMPLE)
    assert code == 0 and err == ""
    # wfbp_100 truth: 12 ms comm, 2.1 ms exposed per step -> 82.5 % hidden.
    assert "82.5 %" in out and "summary: 2 rank(s), 3 step(s)" in out


def test_report_json_is_the_contract(capsys):
    code, out, _ = run(capsys, "report", SAMPLE, "--format", "json")
    data = json.loads(out)
    assert code == 0 and data["schema"] == "tracelens.report/1"
    assert set(data) >= {"schema", "tool", "inputs", "ranks", "summary", "collectives", "diagnoses", "warnings"}
    step = data["ranks"][0]["steps"][0]
    assert set(step) >= {"step", "start_ns", "end_ns", "duration_ns", "compute_ns", "comm_ns", "overlap_ns",
                         "exposed_comm_ns", "idle_ns", "overlap_pct", "exposed_comm_fraction"}
    assert step["exposed_comm_ns"] == 2_100_000 and data["summary"]["worst_rank"] in (0, 1)
    assert data["inputs"][0]["format"] == "kineto"


def test_report_markdown_to_file_and_no_overwrite(capsys, tmp_path):
    target = tmp_path / "summary.md"
    code, out, _ = run(capsys, "report", SAMPLE, "--format", "markdown", "-o", str(target))
    assert code == 0 and out == ""
    assert target.read_text().startswith("# tracelens overlap report")
    code, _, err = run(capsys, "report", SAMPLE, "-o", str(target))
    assert code == 2 and "output file exists" in err and err.count("\n") == 1
    assert run(capsys, "report", SAMPLE, "-o", str(target), "--force")[0] == 0


def test_export_parquet(capsys, tmp_path):
    code, out, _ = run(capsys, "export", SAMPLE, "-o", str(tmp_path / "tables"))
    assert code == 0 and "device_ops.parquet" in out
    ops = pd.read_parquet(tmp_path / "tables" / "device_ops.parquet")
    # wfbp_100: per rank and step 4 forward + 100 backward + 100 comm + 1 optimizer kernels; 3 steps, 2 ranks.
    assert len(ops) == 2 * 3 * 205
    assert sorted(ops["rank"].unique()) == [0, 1] and ops["start_ns"].dtype == "int64"
    assert (ops["kind"] == "comm").sum() == 2 * 3 * 100


@pytest.mark.parametrize("args, code, text", [
    (["report", "/no/such/trace.json"], 2, "no such file or directory"),
    (["report", SAMPLE, "--comm-pattern", "("], 2, "not a valid regular expression"),
    (["report", SAMPLE, "--format", "pdf"], 2, "invalid value"),
])
def test_usage_errors(capsys, args, code, text):
    got, _, err = run(capsys, *args)
    assert got == code and text in err


def test_unreadable_input_exit_code_3(capsys, tmp_path):
    bad = tmp_path / "rank0.json"
    bad.write_text("{ not json")
    code, out, err = run(capsys, "report", str(bad))
    assert code == 3 and out == ""
    assert err.startswith("tracelens: error: ") and str(bad) in err and "Traceback" not in err


def test_console_script_exit_codes(tmp_path):
    import subprocess
    import sys
    bad = tmp_path / "x.json.gz"
    bad.write_bytes(b"\x1f\x8b\x08\x00broken")
    proc = subprocess.run([sys.executable, "-c", "from tracelens.cli import run; run()", "report", str(bad)],
                          capture_output=True, text=True)
    assert proc.returncode == 3 and "truncated or corrupt gzip" in proc.stderr


@pytest.mark.parametrize("args, code", [(["--version"], 0), (["report", "/no/such/run"], 2)])
def test_python_m_is_the_command(args, code):
    """``python -m tracelens.cli`` gives the command's exit codes and output, flushed before its fast exit."""
    proc = subprocess.run([sys.executable, "-m", "tracelens.cli", *args], capture_output=True, text=True,
                          cwd=SAMPLES.parent)
    assert proc.returncode == code
    if code == 0:
        assert proc.stdout.startswith("tracelens, version ")
    else:
        assert proc.stderr.strip() == "tracelens: error: /no/such/run: no such file or directory"


def test_unwritable_outputs_are_usage_errors(capsys, tmp_path):
    # No such folder, or a file where the export folder goes: one line naming the path, exit 2.
    afile = tmp_path / "afile"
    afile.write_text("x")
    missing = tmp_path / "no" / "such"
    for args, path in ((["report", SAMPLE, "-o", str(missing / "r.md")], missing / "r.md"),
                       (["export", SAMPLE, "-o", str(afile)], afile),
                       (["gate", SAMPLE, "--no-config", "--min-overlap-pct", "1", "--junit", str(missing / "g.xml")],
                        missing / "g.xml"),
                       (["gate", SAMPLE, "--no-config", "--min-overlap-pct", "1", "--summary-md",
                         str(missing / "g.md")], missing / "g.md")):
        code, _, err = run(capsys, *args)
        assert code == 2 and err.startswith(f"tracelens: error: {path}: cannot write output: ")
        assert err.count("\n") == 1 and "Traceback" not in err


def test_markdown_groups_identical_collectives(capsys):
    # wfbp_100 truth per rank: 100 identical 25 MiB all-reduces per step over 3 steps; 2.1 ms of each step's
    # 12 ms of communication exposed in 0.12 ms kernels -> 17 fully exposed + 1 partly = 18 per step:
    # 54 of the 300 have exposed time, 3 x 2.1 = 6.3 ms in total, the worst one 0.12 ms (first in step 2).
    code, out, _ = run(capsys, "report", SAMPLE, "--format", "markdown")
    section = out.split("## Most exposed collectives")[1].split("##")[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "---" not in line]
    assert code == 0 and rows[0] == "| rank | op | size | count | exposed ms | worst ms | worst step | kernel |"
    assert [row.split(" | ")[:7] for row in rows[1:]] == [
        ["| 0", "all_reduce", "25.0 MiB", "54 of 300", "6.300", "0.120", "2"],
        ["| 1", "all_reduce", "25.0 MiB", "54 of 300", "6.300", "0.120", "2"]]


def test_step_tables_show_copy_time(capsys):
    # The "copy ms" column (memcpy + memset time) follows "idle ms" in both text and Markdown.
    _, text_out, _ = run(capsys, "report", SAMPLE)
    assert "│ idle ms │ copy ms │" in text_out.replace("┃", "│")
    _, md, _ = run(capsys, "report", SAMPLE, "--format", "markdown")
    assert "| idle ms | copy ms | overlap % |" in md


def test_names_with_brackets_are_shown_as_written(capsys, tmp_path):
    # Kernel names and history labels are data, not rich markup: "[/x]" used to raise MarkupError and
    # "[bar]" vanished.
    import msgspec

    from tracelens import analyze, load
    from tracelens.renderers import render

    rep = analyze(load(SAMPLE))
    name = "ncclKernel<float>[bar][/x]"
    rep = msgspec.structs.replace(rep, collectives=[msgspec.structs.replace(c, name=name)
                                                    for c in rep.collectives])
    assert name in render(rep, "text", width=160)
    db = str(tmp_path / "h.db")
    assert run(capsys, "history", "add", SAMPLE, "--db", db, "--label", "exp[3][/x]")[0] == 0
    code, out, _ = run(capsys, "history", "list", "--db", db)
    assert code == 0 and "exp[3][/x]" in out
    code, out, _ = run(capsys, "history", "show", "1", "--db", db)
    assert code == 0 and "exp[3][/x]" in out


HEAVY = ("pandas", "numpy", "rich", "pyarrow", "msgspec", "sqlite_utils", "dash", "plotly")


@pytest.mark.parametrize("command", ["", "report", "export", "gate", "collect", "history", "history add",
                                     "dashboard"])
def test_help_imports_nothing_heavy(command):
    # `--help` and option errors answer before any heavy library loads: no cli module imports one at module
    # level (each command imports what it needs inside its function).
    import subprocess
    import sys
    code = ("import sys\nfrom tracelens.cli import main\n"
            f"code = main({[*command.split(), '--help']!r})\n"
            f"print(code, sorted(m for m in {HEAVY!r} if m in sys.modules))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[-1] == "0 []"
    assert "Usage: tracelens" in proc.stdout


def test_every_command_is_its_own_small_module():
    # One module per command, each only options, api calls and rendering: none grows past ~400 lines.
    from pathlib import Path

    import importlib

    # The modules themselves: the package's attribute ``gate`` is the api function once it has been asked
    # for, whatever was imported before (tests/integration/test_hostile_features.py calls it).
    cli, gate = importlib.import_module("tracelens.cli"), importlib.import_module("tracelens.gating")
    folder = Path(cli.__file__).parent
    assert {p.stem for p in folder.glob("*.py")} >= {"__init__", "terminal", "report", "export", "gate",
                                                     "history", "collect", "dashboard"}
    sizes = {str(p): len(p.read_text().splitlines())
             for pkg in (cli, gate) for p in Path(pkg.__file__).parent.glob("*.py")}
    assert max(sizes.values()) <= 400, sizes


def test_workers_start_before_heavy_imports(tmp_path):
    """`tracelens report` of several files forks its workers before it imports numpy, msgspec, the contract,
    the analyzers, the NCCL log patterns or rich: each worker imports what it needs on its own core while
    this process does the same (tracelens/pool.py). An import moved in front of the fork delays every
    cold report by its cost (pandas, once: 50 ms on the 54 MB bench trace)."""
    heavy = ("pandas", "rich", "numpy", "msgspec", "subprocess", "tracelens.contract", "tracelens.analyzers",
             "tracelens.parsers.nccl.debug_log", "tracelens.parsers.kineto.decode")
    code = (
        "import os, sys\n"
        "real = os.fork\n"
        "def spy():\n"
        f"    print('heavy at fork:', sorted(m for m in {heavy!r} if m in sys.modules), flush=True)\n"
        "    return real()\n"
        "os.fork = spy\n"
        "from tracelens.cli import main\n"
        f"sys.exit(main(['report', {str(SAMPLES / 'wfbp_100')!r}, '--format', 'json']))\n")
    # A first report (nothing cached), with a worker whatever the cores here.
    env = {**os.environ, "TRACELENS_CACHE": str(tmp_path / "cache"), "TRACELENS_JOBS": "1"}
    env.pop("TRACELENS_SPAWN_WORKERS", None)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("heavy at fork: []\n"), out.stdout[:300]


NCCL_LINES = ["h1:10:11 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
              "h1:10:11 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
              "h2:20:21 [0] NCCL INFO NCCL_IB_HCA set by environment to mlx5_0",
              "h2:20:21 [0] NCCL INFO comm 0x2 rank 1 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0",
              "h2:20:21 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [send] via NET/Socket/0"]


def test_report_on_a_folder_of_nccl_logs_in_a_subprocess(tmp_path):
    # Logs alone, as `tracelens report run/nccl/` runs them: sockets between two nodes with NCCL_IB_HCA set
    # (RDMA expected) is the silent fallback, critical.
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "h1.10.log").write_text("\n".join(NCCL_LINES[:2]) + "\n")
    (tmp_path / "nccl" / "h2.20.log").write_text("\n".join(NCCL_LINES[2:]) + "\n")
    exe = [str(Path(sys.executable).parent / "tracelens")]          # the installed console script
    proc = subprocess.run([*exe, "report", str(tmp_path / "nccl"), "--format", "json"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    rep = json.loads(proc.stdout)
    assert rep["ranks"] == [] and rep["transport"]["verdict"] == "tcp_silent_fallback"
    assert [(e["file"].rsplit("/", 1)[-1], e["line"]) for e in rep["transport"]["evidence"]] == \
        [("h1.10.log", 2), ("h2.20.log", 1)]     # h1's socket line, the NCCL_IB_HCA echo
    # Without a commId the two comm pointers are two communicators, each on sockets.
    assert [c["verdict"] for c in rep["transport"]["communicators"]] == ["tcp_silent_fallback"] * 2
    assert [(d["id"], d["severity"], d["rank"]) for d in rep["diagnoses"]] == [("nccl-transport", "critical", 0)]
    text = subprocess.run([*exe, "report", str(tmp_path / "nccl")], capture_output=True, text=True, timeout=120)
    # The verdict once, as the finding's heading, its communicators' verdicts under it.
    assert text.returncode == 0 and "CRITICAL rank 0 · whole run · network transport: TCP sockets" in text.stdout
    assert text.stdout.count("-> tcp_silent_fallback") == 2


def test_nccl_logs_alone_have_nothing_to_export_and_an_empty_log_folder_is_an_error(capsys, tmp_path):
    (tmp_path / "nccl").mkdir()
    (tmp_path / "nccl" / "h1.10.log").write_text("\n".join(NCCL_LINES[:2]) + "\n")
    code, _, err = run(capsys, "export", str(tmp_path / "nccl"), "-o", str(tmp_path / "out"))
    assert code == 2 and "NCCL logs alone have no tables to export" in err
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "job.log").write_text("epoch 1\n")
    code, _, err = run(capsys, "report", str(tmp_path / "other" / "job.log"))
    assert code == 2 and "no NCCL log" in err and "job.log (no NCCL lines)" in err


def test_export_names_the_host_range_and_the_step_window_apart(capsys, tmp_path):
    # wfbp_100 generator truth: each ProfilerStep range on the CPU lasts 2.08 ms, the step's device window (what
    # every metric counts) 16.47 ms; the report's step 2 of rank 0 is that window.
    code, out, _ = run(capsys, "export", SAMPLE, "-o", str(tmp_path / "t"))
    assert code == 0 and "step_metrics.parquet" in out and "collective_metrics.parquet" in out
    steps = pd.read_parquet(tmp_path / "t" / "steps.parquet")
    assert list(steps.columns) == ["rank", "step", "host_start_ns", "host_end_ns", "window_start_ns", "window_end_ns"]
    first = steps[(steps["rank"] == 0) & (steps["step"] == 2)].iloc[0]
    assert first["host_end_ns"] - first["host_start_ns"] == 2_080_000
    assert first["window_end_ns"] - first["window_start_ns"] == 16_470_000
    data = json.loads(run(capsys, "report", SAMPLE, "--format", "json")[1])
    step = data["ranks"][0]["steps"][0]
    assert (step["start_ns"], step["end_ns"]) == (first["window_start_ns"], first["window_end_ns"])


def test_exported_metrics_reproduce_the_report(capsys, tmp_path):
    # gloo_no_sync (a real 2-rank recording whose ranks wait for each other): every number of the report's
    # steps is a column of step_metrics.parquet, and every collective's exposed time, wait and transfer is a
    # row of collective_metrics.parquet, so that joining them in a notebook gives the report back.
    folder = str(SAMPLES / "gloo_no_sync")
    assert run(capsys, "export", folder, "-o", str(tmp_path / "t"))[0] == 0
    data = json.loads(run(capsys, "report", folder, "--format", "json")[1])
    metrics = pd.read_parquet(tmp_path / "t" / "step_metrics.parquet")
    rows = {(r["rank"], r["step"]): r for r in metrics.to_dict("records")}
    assert len(rows) == sum(len(r["steps"]) for r in data["ranks"]) == 6
    for r in data["ranks"]:
        for s in r["steps"]:
            got = rows[r["rank"], s["step"]]
            for key, value in s.items():
                if isinstance(value, (dict, list)) or value is None and key in ("pattern_evidence", "by_dimension"):
                    continue
                name = {"start_ns": "window_start_ns", "end_ns": "window_end_ns"}.get(key, key)
                assert got[name] == value or value is None and pd.isna(got[name]), (r["rank"], s["step"], key)
    assert any(s["wait_ns"] for r in data["ranks"] for s in r["steps"])        # the ranks did wait
    colls = pd.read_parquet(tmp_path / "t" / "collective_metrics.parquet")
    assert len(colls) == len(data["collectives"])
    assert colls["exposed_ns"].tolist() == [c["exposed_ns"] for c in data["collectives"]]
    # Each matched instance's wait is its members' waits summed, its transfer each member's own.
    matched = data["cross_rank"]["collectives"]
    assert colls["wait_ns"].notna().sum() == sum(len(m["ranks"]) for m in matched)
    assert int(colls["wait_ns"].sum()) == sum(m["wait_ns"] for m in matched) > 0
    assert sorted(colls["transfer_ns"].dropna().astype(int)) == sorted(m["transfer_ns"] for m in matched
                                                                       for _ in m["ranks"])


def test_export_into_an_earlier_export_needs_force_and_never_touches_other_files(capsys, tmp_path):
    # The rule of report -o: an output that exists is not overwritten without --force.
    out = tmp_path / "t"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert run(capsys, "export", SAMPLE, "-o", str(out))[0] == 0        # a folder of other files is fine
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    (out / "steps.parquet").write_bytes(b"an older export")
    code, _, err = run(capsys, "export", SAMPLE, "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and "use --force" in err and "steps.parquet" in err
    assert (out / "steps.parquet").read_bytes() == b"an older export"
    assert run(capsys, "export", SAMPLE, "-o", str(out), "--force")[0] == 0
    after = {p.name: p.read_bytes() for p in out.iterdir()}
    assert after == before and after["notes.txt"] == b"mine"
    # A dangling link at one of its names is a name in use too: refused without --force, replaced (as a
    # name, its target never made) with it.
    (out / "ranks.parquet").unlink()
    (out / "ranks.parquet").symlink_to(tmp_path / "nowhere.parquet")
    code, _, err = run(capsys, "export", SAMPLE, "-o", str(out))
    assert code == 2 and "ranks.parquet" in err and (out / "ranks.parquet").is_symlink()
    assert run(capsys, "export", SAMPLE, "-o", str(out), "--force")[0] == 0
    assert not (out / "ranks.parquet").is_symlink() and not (tmp_path / "nowhere.parquet").exists()


@pytest.mark.parametrize("group", [[], ["history"], ["cache"]])
def test_command_summaries_fit_whole_at_80_columns(capsys, monkeypatch, group):
    # Each command's line in --help is its whole summary, one sentence, never cut mid-sentence with "...".
    import click

    from tracelens.cli import cli

    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = run(capsys, *group, "--help")
    assert code == 0
    listed = out.split("Commands:\n", 1)[1].splitlines()
    ctx = click.Context(cli)
    # The top group loads each command on use (its list_commands / get_command); a command's own group holds
    # its subcommands.
    commands = cli.get_command(ctx, group[0]).commands if group else \
        {name: cli.get_command(ctx, name) for name in cli.list_commands(ctx)}
    assert len(listed) == len(commands) and all(len(line) <= 80 for line in listed), listed
    for line in listed:
        name, summary = line.split(maxsplit=1)
        assert summary == commands[name].short_help and summary.endswith(".") and "..." not in summary, line


def test_a_file_name_that_is_not_utf8_is_printed_escaped_everywhere(tmp_path):
    # Python reads the byte 0xff of a file name as a lone surrogate, which no UTF-8 output can hold: the report
    # (JSON, text, Markdown), the history, the export, warnings and errors write it as \xff, never a traceback.
    import shutil

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(SAMPLES / "one_bucket" / "rank0.json.gz", run_dir / os.fsdecode(b"rank\xff0.json.gz"))
    (run_dir / os.fsdecode(b"conf\xfe.json")).write_text('{"a": 1}')          # a JSON file that is no trace
    exe = str(Path(sys.executable).parent / "tracelens")
    env = {**{k: v for k, v in os.environ.items() if k != "TRACELENS_NO_CACHE"}, "LC_ALL": "C.UTF-8",
           "TRACELENS_CACHE": str(tmp_path / "cache")}

    def cli(*args, code=0):
        proc = subprocess.run([exe, *args], capture_output=True, env=env, timeout=120, cwd=tmp_path)
        assert proc.returncode == code and b"Traceback" not in proc.stderr, proc.stderr.decode("utf-8", "replace")
        return proc.stdout.decode("utf-8"), proc.stderr.decode("utf-8")       # strict: valid UTF-8 throughout

    for _ in range(2):          # the second report is read back from the warm cache
        data = json.loads(cli("report", "run", "--format", "json")[0])
        assert data["inputs"][0]["path"] == "run/rank\\xff0.json.gz" and data["ranks"][0]["source"] == data["inputs"][0]["path"]
        assert any("run/conf\\xfe.json" in w["message"] for w in data["warnings"] if w["code"] == "not-a-trace")
    for fmt in ("text", "markdown", "html"):
        assert "run/rank\\xff0.json.gz" in cli("report", "run", "--format", fmt)[0]
    assert "added run 1" in cli("history", "add", "run", "--db", "h.db", "--label", "x")[0]
    assert "run" in cli("history", "show", "1", "--db", "h.db")[0]
    cli("export", "run", "-o", "tables")
    assert pd.read_parquet(tmp_path / "tables" / "ranks.parquet")["source"].tolist() == ["run/rank\\xff0.json.gz"]
    _, err = cli("report", os.fsdecode(b"no\xffsuch.json"), code=2)
    assert err == "tracelens: error: no\\xffsuch.json: no such file or directory\n"
