"""The local worker pool sharing a report's files with the main process (tracelens/pool.py, executors.Local):
the Report is the one a single process gives, whoever reads which file, whatever a worker does wrong; an
input error is the first file's in input order; no worker outlives a report. Forked workers here (the
patches of this process reach them); fresh interpreters in test_workers.py and below."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tracelens import api, executors, pipeline, pool
from tracelens.errors import InputError, UsageError
from tracelens.options import ReportOptions
from tracelens.parsers import workers
from tests.conftest import SAMPLES, kernel, write_trace

pytestmark = pytest.mark.skipif(not pool.can_fork(), reason="forked workers need Linux and one thread")


@pytest.fixture(autouse=True)
def _forking(monkeypatch):
    monkeypatch.delenv(pool.JOBS_ENV, raising=False)
    monkeypatch.delenv(pool.SPAWN_ENV, raising=False)
    before = set(_children())
    yield
    assert set(_children()) <= before, "a worker outlived the report"


def _children() -> list[int]:
    """This process's live child processes (every thread's), from /proc."""
    kids = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            kids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return kids


def _run(tmp_path: Path, n: int = 6) -> Path:
    """``n`` ranks, each with its rank recorded, two steps of a compute and an NCCL kernel."""
    run = tmp_path / "run"
    run.mkdir()
    for r in range(n):
        events = []
        for s in range(2):
            t0 = 1000 + s * 1000
            events += [{"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{s}", "pid": 1, "tid": 1,
                        "ts": t0, "dur": 900},
                       kernel("sgemm", t0 + 100, 300 + 10 * r),
                       kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", t0 + 200, 400, stream=9)]
        write_trace(run / f"rank{r}.json", events, distributedInfo={"rank": r, "world_size": n})
    return run


def _slowed(monkeypatch, where: str, seconds: float = 0.05, on: dict | None = None):
    """analyze_file slowed in the main process (``where="main"``) or in the workers ("worker"), so that the
    other side reads most files; ``on``: {file name: action} run in the workers on that file. Patched before
    the fork, so the workers run it too."""
    main_pid = os.getpid()
    real = pipeline.analyze_file
    seen: list[str] = []

    def patched(path, *args, **kwargs):
        here = os.getpid() == main_pid
        if here:
            seen.append(Path(path).name)
        if (where == "main") == here:
            time.sleep(seconds)
        if not here and on and Path(path).name in on:
            on[Path(path).name]()
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "analyze_file", patched)
    return seen


def test_the_report_is_the_one_process_report(tmp_path, monkeypatch):
    run = _run(tmp_path)
    expected = api.report([run], jobs=0, cache=False).to_json()
    read_here = _slowed(monkeypatch, "main", 0.2)      # 1.2 s for all six here: the worker has time to start
    assert api.report([run], jobs=1, cache=False).to_json() == expected
    assert 0 < len(read_here) < 6           # both sides read files


@pytest.mark.parametrize("case", ["compute_bound_8", "straggler", "nsys_wfbp_100"])
def test_samples_equal_with_and_without_workers(case, monkeypatch):
    expected = api.report([SAMPLES / case], jobs=0, cache=False).to_json()
    _slowed(monkeypatch, "main", 0.02)
    assert api.report([SAMPLES / case], jobs=2, cache=False).to_json() == expected


def test_an_error_found_once_every_file_is_read_is_the_same(tmp_path, monkeypatch):
    # A Kineto run and an nsys export of another run: two runs, refused once every file is read (the
    # export mostly by the worker, since the main process is slowed and reads the first file).
    for case in ("wfbp_100", "nsys_wfbp_100"):
        shutil.copytree(SAMPLES / case, tmp_path / case)
    paths = [tmp_path / "wfbp_100", tmp_path / "nsys_wfbp_100"]
    with pytest.raises(UsageError) as alone:
        api.report(paths, jobs=0, cache=False)
    _slowed(monkeypatch, "main")
    with pytest.raises(UsageError) as shared:
        api.report(paths, jobs=1, cache=False)
    assert "2 different runs" in str(alone.value) and str(shared.value) == str(alone.value)


def test_a_worker_that_dies_holding_a_file(tmp_path, monkeypatch):
    run = _run(tmp_path)
    expected = api.report([run], jobs=0, cache=False).to_json()
    read_here = _slowed(monkeypatch, "main", on={"rank2.json": lambda: os._exit(9),
                                                 "rank3.json": lambda: os._exit(9)})
    assert api.report([run], jobs=2, cache=False).to_json() == expected
    # Every file a dead worker held was read here after all (each worker dies on the first it meets).
    assert {"rank2.json", "rank3.json"} <= set(read_here)


def test_a_bug_in_a_worker_is_read_again_here(tmp_path, monkeypatch):
    run = _run(tmp_path)
    expected = api.report([run], jobs=0, cache=False).to_json()

    def bug():
        raise RuntimeError("a bug in the worker")

    read_here = _slowed(monkeypatch, "main", on={f"rank{r}.json": bug for r in range(6)})
    assert api.report([run], jobs=1, cache=False).to_json() == expected
    assert sorted(read_here) == [f"rank{r}.json" for r in range(6)]


def test_a_bug_here_shows_its_own_traceback(tmp_path, monkeypatch):
    run = _run(tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("the bug")

    monkeypatch.setattr(pipeline, "analyze_file", broken)
    with pytest.raises(RuntimeError, match="the bug"):
        api.report([run], jobs=1, cache=False)


@pytest.mark.parametrize("slow", ["main", "worker"])
def test_the_input_error_is_the_first_bad_file_in_input_order(tmp_path, monkeypatch, slow):
    run = _run(tmp_path, 8)
    (run / "rank3.json").write_text('{"traceEvents": [')      # truncated
    (run / "rank6.json").write_text('{"traceEvents": [{"ph": "X"')
    with pytest.raises(InputError) as alone:
        api.report([run], jobs=0, cache=False)
    assert "rank3.json" in str(alone.value.path)
    _slowed(monkeypatch, slow, 0.2)      # the other side meets both bad files
    with pytest.raises(InputError) as shared:
        api.report([run], jobs=1, cache=False)
    assert shared.value.path == alone.value.path and str(shared.value) == str(alone.value)


def test_a_cached_report_stops_the_workers(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACELENS_CACHE", str(tmp_path / "cache"))
    run = _run(tmp_path)
    for f in run.iterdir():         # written a moment ago: too fresh to tell from a rewrite
        os.utime(f, (time.time() - 60, time.time() - 60))
    first = api.report([run], jobs=1).to_json()

    def no_reading(*args, **kwargs):
        raise AssertionError("a file was read for a report the cache holds")

    monkeypatch.setattr(pipeline, "analyze_file", no_reading)
    assert api.report([run], jobs=1).to_json() == first       # the fixture checks no worker is left


def _local_workers(files, jobs) -> int:
    """How many workers the local executor starts for ``files`` (each a report worker, then stopped)."""
    with executors.Local(files, ReportOptions(jobs=jobs), executors.FileJob(pipeline.analyze_file, bool)) as local:
        return local.workers


def test_worker_count(monkeypatch, tmp_path):
    files = [tmp_path / f"r{i}.json" for i in range(8)]
    monkeypatch.setattr(pool, "cores", lambda: 2)
    assert _local_workers(files, 0) == 0
    assert _local_workers(files[:1], None) == 0             # one file: read here
    monkeypatch.setattr(pool, "cores", lambda: 1)
    assert _local_workers(files, None) == 0                 # one core: no worker
    for cores, jobs, expected in [(2, None, 1), (4, None, 3), (16, None, 7), (2, 3, 3), (2, 20, 7)]:
        monkeypatch.setattr(pool, "cores", lambda cores=cores: cores)
        assert _local_workers(files, jobs) == expected
    monkeypatch.setenv(pool.JOBS_ENV, "2")
    assert _local_workers(files, None) == 2


def test_no_fork_while_another_thread_runs(tmp_path, monkeypatch):
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert pool.plan([tmp_path / "a", tmp_path / "b"], 1, beside=True) == pool.WorkerPlan(1, fork=False)
        # Small files: no fresh interpreter is worth its start-up either (below MIN_BYTES of JSON).
        assert pool.plan([tmp_path / "a", tmp_path / "b"], None, beside=True).workers == 0
    finally:
        stop.set()
        thread.join()


# ------------------------------------------------------------------------------------------ the pool itself

def _square(setup, i):
    if i == setup["die_at"]:
        os._exit(3)
    if i == setup["bug_at"]:
        raise ValueError("bug")
    if i == setup["unpicklable_at"]:
        return lambda: i
    return i * i


@pytest.mark.parametrize("workers_n", [1, 3])
def test_every_job_is_answered_once(workers_n):
    # 5,000 jobs: more than one 4 KB write of job numbers, so the writer thread refills the pipe as it drains.
    n = 5000
    setup = {"die_at": -1, "bug_at": -1, "unpicklable_at": -1}
    with pool.Pool(n, workers_n, _square, lambda: None) as shared:
        shared.start(setup)
        mine = []
        while (i := shared.claim()) is not None:
            mine.append(i)
        answers = list(shared.ready()) + list(shared.rest())
    theirs = [i for i, status, value in answers if status == "ok" and value == i * i]
    assert len(answers) == len(theirs)
    assert sorted(mine + theirs) == list(range(n))           # each job once, by one side


def test_what_goes_wrong_in_a_worker_is_reported_or_left_missing():
    n = 400
    setup = {"die_at": 300, "bug_at": 5, "unpicklable_at": 7}
    with pool.Pool(n, 2, _square, lambda: None) as shared:
        shared.start(setup)
        time.sleep(0.2)         # the workers claim everything first
        mine = []
        while (i := shared.claim()) is not None:
            mine.append(i)
        answers = {i: (status, value) for i, status, value in [*shared.ready(), *shared.rest()]}
    for i in (5, 7):
        if i not in mine:
            assert answers[i][0] == "failed"            # a bug, or an answer that cannot travel: redo it
    assert 300 not in answers                           # its worker died holding it: missing
    done = set(mine) | {i for i, (status, _) in answers.items() if status == "ok"}
    assert set(range(n)) - done - {5, 7} == {300} - set(mine)


def test_a_worker_whose_imports_fail_claims_nothing():
    def failing():
        raise ImportError("no such module")

    with pool.Pool(10, 1, _square, failing) as shared:
        shared.start({"die_at": -1, "bug_at": -1, "unpicklable_at": -1})
        mine = []
        while (i := shared.claim()) is not None:
            mine.append(i)
        assert list(shared.ready()) + list(shared.rest()) == []
    assert mine == list(range(10))


def test_close_before_start_stops_the_waiting_workers():
    shared = pool.Pool(10, 2, _square, lambda: None)
    assert shared.workers == 2
    shared.close()
    shared.close()              # idempotent


def test_an_answer_of_the_wrong_kind_is_read_again_here(tmp_path, monkeypatch):
    # A worker whose analyze_file gives something that is not a list of Parts (or raises nothing a user can
    # be shown): the file is read here, and the Report is the one-process one.
    run = _run(tmp_path)
    expected = api.report([run], jobs=0, cache=False).to_json()
    main_pid = os.getpid()
    real = pipeline.analyze_file

    def odd(path, *args, **kwargs):
        if os.getpid() != main_pid:
            return {"not": "parts"}
        time.sleep(0.05)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(pipeline, "analyze_file", odd)
    assert api.report([run], jobs=1, cache=False).to_json() == expected


def test_no_worker_hands_every_job_here():
    shared = pool.Pool(3, 0, _square)
    shared.start(None)
    assert [shared.claim() for _ in range(4)] == [0, 1, 2, None] and list(shared.rest()) == []
    shared.close()


@pytest.mark.parametrize("fork", [True, False])
def test_answers_taken_in_order_by_a_caller_that_claims_none(fork):
    # load's way: the workers decode, this process takes each file's answer in input order; a fresh
    # interpreter (python -m tracelens.pool) serves the same protocol as a forked worker.
    files = sorted((SAMPLES / "straggler").glob("*.json.gz"))
    with pool.Pool(len(files), 2, workers.decode, fork=fork) as shared:
        assert shared.workers == 2
        shared.start(files)
        answers = [shared.answer(i) for i in reversed(range(len(files)))]
    assert [status for status, _ in answers] == ["ok"] * len(files)
    assert [columns.meta.source for _, columns in answers] == [str(f) for f in reversed(files)]


def test_a_fresh_interpreter_that_cannot_start_answers_nothing(monkeypatch):
    monkeypatch.setattr(pool.sys, "executable", "/nonexistent/python")
    with pool.Pool(2, 1, workers.decode, fork=False) as shared:
        shared.start([])
        assert shared.answer(0) is None
        assert [shared.claim(), shared.claim(), shared.claim()] == [0, 1, None]
