"""Forked workers sharing a report's files with the main process (tracelens/forked.py, executors._shared):
the Report is the one a single process gives, whoever reads which file, whatever a worker does wrong; an
input error is the first file's in input order; no worker outlives a report."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest

from tracelens import api, executors, forked
from tracelens.errors import InputError, UsageError
from tracelens.parsers import workers
from tests.conftest import SAMPLES, kernel, write_trace

pytestmark = pytest.mark.skipif(not workers.can_fork(), reason="forked workers need Linux and one thread")


@pytest.fixture(autouse=True)
def _forking(monkeypatch):
    monkeypatch.delenv(workers.JOBS_ENV, raising=False)
    monkeypatch.delenv(workers.SPAWN_ENV, raising=False)
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
    real = executors.analyze_file
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

    monkeypatch.setattr(executors, "analyze_file", patched)
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

    monkeypatch.setattr(executors, "analyze_file", broken)
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

    monkeypatch.setattr(executors, "analyze_file", no_reading)
    assert api.report([run], jobs=1).to_json() == first       # the fixture checks no worker is left


def test_worker_count(monkeypatch, tmp_path):
    files = [tmp_path / f"r{i}.json" for i in range(8)]
    monkeypatch.setattr(workers, "cores", lambda: 2)
    assert executors._fork_pool(files, 0) is None
    assert executors._fork_pool(files[:1], None) is None          # one file: read here
    monkeypatch.setattr(workers, "cores", lambda: 1)
    assert executors._fork_pool(files, None) is None              # one core: no worker
    for cores, jobs, expected in [(2, None, 1), (4, None, 3), (16, None, 7), (2, 3, 3), (2, 20, 7)]:
        monkeypatch.setattr(workers, "cores", lambda cores=cores: cores)
        pool = executors._fork_pool(files, jobs)
        try:
            assert pool.workers == expected
        finally:
            pool.close()
    monkeypatch.setenv(workers.JOBS_ENV, "2")
    pool = executors._fork_pool(files, None)
    try:
        assert pool.workers == 2
    finally:
        pool.close()


def test_no_fork_while_another_thread_runs(tmp_path, monkeypatch):
    import threading

    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        assert executors._fork_pool([tmp_path / "a", tmp_path / "b"], 1) is None
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
    with forked.ForkedPool(n, workers_n, lambda: None, _square) as pool:
        pool.start(setup)
        mine = []
        while (i := pool.claim()) is not None:
            mine.append(i)
        answers = list(pool.ready()) + list(pool.rest())
    theirs = [i for i, status, value in answers if status == "ok" and value == i * i]
    assert len(answers) == len(theirs)
    assert sorted(mine + theirs) == list(range(n))           # each job once, by one side


def test_what_goes_wrong_in_a_worker_is_reported_or_left_missing():
    n = 400
    setup = {"die_at": 300, "bug_at": 5, "unpicklable_at": 7}
    with forked.ForkedPool(n, 2, lambda: None, _square) as pool:
        pool.start(setup)
        time.sleep(0.2)         # the workers claim everything first
        mine = []
        while (i := pool.claim()) is not None:
            mine.append(i)
        answers = {i: (status, value) for i, status, value in [*pool.ready(), *pool.rest()]}
    for i in (5, 7):
        if i not in mine:
            assert answers[i][0] == "failed"            # a bug, or an answer that cannot travel: redo it
    assert 300 not in answers                           # its worker died holding it: missing
    done = set(mine) | {i for i, (status, _) in answers.items() if status == "ok"}
    assert set(range(n)) - done - {5, 7} == {300} - set(mine)


def test_a_worker_whose_imports_fail_claims_nothing():
    def failing():
        raise ImportError("no such module")

    with forked.ForkedPool(10, 1, failing, _square) as pool:
        pool.start({"die_at": -1, "bug_at": -1, "unpicklable_at": -1})
        mine = []
        while (i := pool.claim()) is not None:
            mine.append(i)
        assert list(pool.ready()) + list(pool.rest()) == []
    assert mine == list(range(10))


def test_close_before_start_stops_the_waiting_workers():
    pool = forked.ForkedPool(10, 2, lambda: None, _square)
    assert pool.workers == 2
    pool.close()
    pool.close()                # idempotent


def test_an_answer_of_the_wrong_kind_is_read_again_here(tmp_path, monkeypatch):
    # A worker whose analyze_file gives something that is not a list of Parts (or raises nothing a user can
    # be shown): the file is read here, and the Report is the one-process one.
    run = _run(tmp_path)
    expected = api.report([run], jobs=0, cache=False).to_json()
    main_pid = os.getpid()
    real = executors.analyze_file

    def odd(path, *args, **kwargs):
        if os.getpid() != main_pid:
            return {"not": "parts"}
        time.sleep(0.05)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(executors, "analyze_file", odd)
    assert api.report([run], jobs=1, cache=False).to_json() == expected
