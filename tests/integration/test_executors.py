"""Report file by file (tracelens/pipeline.py, tracelens/executors.py): the same Report as loading every trace first and analysing
them together (api.load + api.analyze, the reference path), whatever the ranks' numbering needs; and the
Dask executor's Report byte for byte the local one's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracelens import api
from tracelens.errors import UsageError
from tracelens.parsers import discover, nccl
from tests.conftest import ROOT, SAMPLES, kernel, write_trace


def _reference(paths) -> bytes:
    """The Report the way it was made before file-by-file analysis: every trace loaded, then analysed."""
    files = discover([str(p) for p in paths])
    traces = api.load(paths, jobs=0)
    return api.analyze(traces, nccl=nccl.inputs(files.nccl_logs, files.logs_skipped, traces)).to_json()


def _steps(rank: int | None):
    """Two ProfilerStep spans with a compute kernel and an NCCL kernel each; ``rank`` in distributedInfo."""
    events = []
    for s in range(2):
        t0 = 1000 + s * 1000
        events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                    "ts": t0, "dur": 900},
                   kernel("sgemm", t0 + 100, 300), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 200,
                                                        400, stream=9)]
    top = {"distributedInfo": {"rank": rank, "world_size": 4}} if rank is not None else {}
    return events, top


def _run(tmp_path, names_ranks):
    for name, rank in names_ranks:
        events, top = _steps(rank)
        write_trace(tmp_path / name, events, **top)
    return tmp_path


def test_unnumbered_ranks_settle_as_when_loaded_together(tmp_path):
    # b and c record no rank: loaded together they are numbered 1 and 2 (0 is a's, 3 is d's, recorded), and
    # file by file they are analysed first under a stand-in number and renumbered.
    run = _run(tmp_path, [("a.json", 0), ("b.json", None), ("c.json", None), ("d.json", 3)])
    (run / "config.json").write_text('{"not": "a trace"}')      # skipped, noted once on the first rank
    got = api.report([run], jobs=0).to_json()
    assert got == _reference([run])
    doc = json.loads(got)
    assert [r["rank"] for r in doc["ranks"]] == [0, 1, 2, 3]
    codes = {(w["code"], w["rank"]) for w in doc["warnings"]}
    assert {("rank-unknown", 1), ("rank-unknown", 2), ("not-a-trace", None)} <= codes


def test_unnumbered_rank_takes_a_number_a_later_file_leaves_free(tmp_path):
    # a records none and comes first in input order; b records rank 0, so a is numbered 1, not 0.
    run = _run(tmp_path, [("a.json", None), ("b.json", 0)])
    got = api.report([run], jobs=0).to_json()
    assert got == _reference([run])
    assert [(r["rank"], r["source"].rsplit("/", 1)[-1]) for r in json.loads(got)["ranks"]] == [(0, "b.json"),
                                                                                             (1, "a.json")]


def test_two_runs_refused_with_the_same_message(tmp_path):
    # The same rank recorded by two files of one folder: two runs, refused (tracelens/parsers/runs.py).
    run = _run(tmp_path, [("a.json", 0), ("b.json", 0)])
    with pytest.raises(UsageError) as loaded:
        _reference([run])
    with pytest.raises(UsageError) as streamed:
        api.report([run], jobs=0)
    assert str(streamed.value) == str(loaded.value)


@pytest.mark.parametrize("case", ["wfbp_100", "straggler", "nsys_wfbp_100"])
def test_samples_match_the_reference(case):
    assert api.report([SAMPLES / case]).to_json() == _reference([SAMPLES / case])


def test_unknown_executor_is_a_usage_error(tmp_path):
    run = _run(tmp_path, [("a.json", 0)])
    with pytest.raises(UsageError, match="unknown executor"):
        api.report([run], executor="threads")


def test_dask_report_is_the_local_report_byte_for_byte(tmp_path):
    pytest.importorskip("dask.distributed")
    # A LocalCluster of two worker processes; the files travel as paths, the Parts come back. The run holds
    # recorded and unnumbered ranks and a file that is not a trace, so what is settled after the workers
    # answer (in whatever order they finish) is covered too.
    run = _run(tmp_path, [("a.json", 0), ("b.json", None), ("c.json", None), ("d.json", 3)])
    (run / "config.json").write_text('{"not": "a trace"}')
    # No cache: the Report layer would serve the second report whole, and no worker would run.
    local = api.report([run], jobs=0, cache=False).to_json()
    # In a process of its own: a LocalCluster leaves a thread and a child process behind in the process
    # that started it, and a process with threads forks no report worker after it (tracelens/pool.py).
    code = ("import sys; from tracelens import api; "
            f"sys.stdout.buffer.write(api.report([{str(run)!r}], executor='dask', workers=2, cache=False).to_json())")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=300, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    remote = proc.stdout
    assert remote == local
    assert len(json.loads(remote)["ranks"]) == 4


def _wait_for(path, proc, seconds=60):
    """The scheduler file once the scheduler wrote it (whole: it is JSON), or a failure with its output."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"dask scheduler exited {proc.returncode}")
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            time.sleep(0.2)
    pytest.fail("dask scheduler wrote no scheduler file within a minute")


@pytest.mark.slow
def test_a_report_on_a_dask_cluster_started_by_hand_is_the_local_report(tmp_path):
    """A cluster started the way a user starts one (issue 47): `dask scheduler` and two `dask worker`
    processes, separate from tracelens, and `tracelens report --executor dask --scheduler tcp://...`: the
    same Report byte for byte as the local executor's."""
    pytest.importorskip("dask.distributed")
    dask = Path(sys.executable).parent / "dask"
    if not dask.exists():
        pytest.skip("no dask command beside this Python")
    (tmp_path / "run").mkdir()
    run = _run(tmp_path / "run", [("a.json", 0), ("b.json", None), ("c.json", None), ("d.json", 3)])
    (run / "config.json").write_text('{"not": "a trace"}')
    env = {**os.environ, "DASK_DISTRIBUTED__WORKER__DAEMON": "False"}
    sched_file = tmp_path / "scheduler.json"
    procs = []
    try:
        procs.append(subprocess.Popen([str(dask), "scheduler", "--host", "127.0.0.1", "--port", "0",
                                       "--no-dashboard", "--scheduler-file", str(sched_file)],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        address = _wait_for(sched_file, procs[0])["address"]
        assert address.startswith("tcp://127.0.0.1:")
        for n in range(2):
            procs.append(subprocess.Popen([str(dask), "worker", address, "--nthreads", "1", "--no-dashboard",
                                           "--name", f"w{n}", "--local-directory", str(tmp_path / f"w{n}")],
                                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env))
        # Both workers, so that the files really are spread over processes other than the client's.
        code = ("import sys, time; from dask.distributed import Client; c = Client(sys.argv[1], timeout=60); "
                "c.wait_for_workers(2, timeout=60); print(len(c.scheduler_info()['workers']))")
        ready = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=120)
        assert ready.stdout.strip() == "2", ready.stderr[-2000:]
        tl = Path(sys.executable).parent / "tracelens"
        remote = subprocess.run([str(tl), "report", str(run), "--executor", "dask", "--scheduler", address,
                                 "--format", "json", "--no-cache"], capture_output=True, timeout=300, cwd=ROOT)
        assert remote.returncode == 0, remote.stderr.decode()[-2000:]
        local = subprocess.run([str(tl), "report", str(run), "--format", "json", "--no-cache"],
                               capture_output=True, timeout=300, cwd=ROOT)
        assert local.returncode == 0, local.stderr.decode()[-2000:]
        assert remote.stdout == local.stdout
        assert len(json.loads(remote.stdout)["ranks"]) == 4
        # The files were analysed by the cluster's workers: one task per trace file among them.
        code = ("import sys; from dask.distributed import Client; c = Client(sys.argv[1], timeout=60); "
                "print(sum(c.run(lambda dask_worker: dask_worker.state.executed_count).values()))")
        ran = subprocess.run([sys.executable, "-c", code, address], capture_output=True, text=True, timeout=120)
        assert ran.stdout.strip() == "4", (ran.stdout, ran.stderr[-2000:])
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in reversed(procs):
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


def test_a_repeated_dask_report_is_read_whole_without_a_cluster(tmp_path, monkeypatch):
    from tracelens import executors

    run = _run(tmp_path, [("a.json", 0), ("b.json", 1)])
    for f in run.glob("*.json"):                # written a moment ago: too fresh to tell from a rewrite
        os.utime(f, (time.time() - 60, time.time() - 60))
    first = api.report([run], jobs=0)           # fills the Report layer; a Dask report is the same Report

    def no_cluster(*args, **kwargs):
        raise AssertionError("a Dask cluster was started for a report the cache holds")

    monkeypatch.setattr(executors.Dask, "run", no_cluster)
    assert api.report([run], executor="dask", workers=2).to_json() == first.to_json()
    # Changed thresholds are another Report: this one goes to the workers (here, the stand-in).
    with pytest.raises(AssertionError, match="cluster was started"):
        api.report([run], executor="dask", workers=2, thresholds=["critical_exposed_fraction=0.5"])


def test_dask_missing_says_how_to_install(tmp_path, monkeypatch, capsys):
    from tracelens.cli import main

    run = _run(tmp_path, [("a.json", 0), ("b.json", 1)])
    for f in run.glob("*.json"):
        os.utime(f, (time.time() - 60, time.time() - 60))
    api.report([run], jobs=0)         # the Report layer holds it: the missing extra is said all the same
    monkeypatch.setitem(sys.modules, "dask.distributed", None)      # what `import` sees without the extra
    code = main(["report", str(run), "--executor", "dask"])
    err = capsys.readouterr().err.strip()
    assert code == 2                            # usage error (docs/errors.md)
    assert len(err.splitlines()) == 1 and "pip install 'tracelens-overlap[dask]'" in err


@pytest.mark.parametrize("flags", [["--workers", "2"], ["--scheduler", "tcp://127.0.0.1:8786"]])
def test_cluster_flags_need_the_dask_executor(tmp_path, capsys, flags):
    from tracelens.cli import main

    run = _run(tmp_path, [("a.json", 0)])
    assert main(["report", str(run), *flags]) == 2
    assert "needs --executor dask" in capsys.readouterr().err
