"""Kineto decode workers (tracelens/parsers/workers.py on tracelens/pool.py): same result as decoding
in-process, errors passed through, failures fall back; the pool's plan of how many workers of which kind."""

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tracelens
from tracelens.errors import InputError, UsageError
from tracelens import pool
from tracelens.parsers import workers
from tracelens.parsers.kineto import decode_file

from conftest import SAMPLES


def _decoding(files, n: int) -> workers.Decoding:
    """``n`` decode workers of the kind this process may start (forked, or fresh interpreters)."""
    return workers.Decoding(files, pool.WorkerPlan(n, pool.can_fork()))


def _json(traces) -> bytes:
    return tracelens.analyze(traces).to_json()


@pytest.fixture(params=[pytest.param("fork", marks=pytest.mark.single_thread), "spawn"])
def kind(request, monkeypatch):
    """Both kinds of worker: forked from this process (Linux, one thread) or a fresh interpreter."""
    if request.param == "spawn":
        monkeypatch.setenv(pool.SPAWN_ENV, "1")
    else:
        monkeypatch.delenv(pool.SPAWN_ENV, raising=False)
        import threading

        assert pool.can_fork(), f"threads running here, no fork: {[t.name for t in threading.enumerate()]}"
    return request.param


@pytest.mark.parametrize("sample", ["wfbp_100", "straggler", "gloo_sawtooth"])
def test_workers_give_the_same_report_as_decoding_here(sample, kind):
    folder = SAMPLES / sample
    # Reference: every file decoded in this process (jobs=0). Several files over two workers exercise the
    # round-robin assignment and the in-order hand-out.
    assert _json(tracelens.load(str(folder), jobs=2)) == _json(tracelens.load(str(folder), jobs=0))


def test_worker_columns_equal_local_columns(kind):
    f = sorted((SAMPLES / "wfbp_100").glob("rank0*"))[0]
    with _decoding([f], 1) as decoding:
        remote = decoding.take(f)
    local = decode_file(f)
    assert remote is not None, "the worker answered nothing"
    assert remote.meta.rank == local.meta.rank
    assert {c: list(v) for c, v in remote.comm_meta.items()} == {c: list(v) for c, v in local.comm_meta.items()}
    for table in ("device", "host"):
        assert remote.__dict__[table].keys() == local.__dict__[table].keys()
        for name, col in local.__dict__[table].items():
            other = remote.__dict__[table][name]
            if hasattr(col, "codes"):
                assert (other.codes == col.codes).all() and other.categories == col.categories, name
            else:
                assert (other == col).all(), name


def test_files_taken_out_of_order(tmp_path, kind):
    files = sorted((SAMPLES / "straggler").glob("*.json.gz"))
    assert len(files) == 4
    with _decoding(files, 1) as decoding:   # take() asks in reverse order
        got = [decoding.take(f) for f in reversed(files)]
    assert [c.meta.source for c in got] == [str(f) for f in reversed(files)]


def test_an_input_error_found_by_a_worker_names_the_file(tmp_path, kind):
    good = sorted((SAMPLES / "wfbp_100").glob("rank0*"))[0]
    bad = tmp_path / "rank1.json.gz"
    bad.write_bytes(good.read_bytes()[:200])          # truncated gzip
    with pytest.raises(InputError) as local:
        tracelens.load([str(good), str(bad)], jobs=0)
    with pytest.raises(InputError) as remote:
        tracelens.load([str(good), str(bad)], jobs=2)
    assert str(remote.value) == str(local.value)
    assert remote.value.path == str(bad) and "truncated or corrupt gzip" in remote.value.message


def test_a_worker_that_cannot_run_falls_back_to_decoding_here(monkeypatch, kind):
    folder = SAMPLES / "straggler"
    expected = _json(tracelens.load(str(folder), jobs=0))
    # A worker that ends at once (an interpreter that exits; a child that dies before its first answer):
    # no answer comes back, every file is decoded in this process.
    monkeypatch.setattr(pool.sys, "executable", "/bin/true" if Path("/bin/true").exists() else "true")
    monkeypatch.setattr(workers, "decode", lambda paths, i: os._exit(3))
    assert _json(tracelens.load(str(folder), jobs=2)) == expected


def test_close_stops_every_worker(kind):
    files = sorted((SAMPLES / "straggler").glob("*.json.gz"))
    decoding = _decoding(files, 2)
    pids = [p if isinstance(p, int) else p.pid for p in decoding._pool._procs]
    assert len(pids) == 2 and all(pids)
    decoding.take(files[0])
    decoding.close()                                   # files 1..3 never taken
    for pid in pids:                                   # ended and reaped: no such process any more
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


@pytest.mark.single_thread
def test_workers_are_forked_only_while_this_process_runs_one_thread(monkeypatch):
    import threading

    monkeypatch.delenv(pool.SPAWN_ENV, raising=False)
    assert pool.can_fork()
    stop = threading.Event()
    t = threading.Thread(target=stop.wait)
    t.start()
    try:
        assert not pool.can_fork()
        files = sorted((SAMPLES / "straggler").glob("*.json.gz"))
        plan = pool.plan(files, 1, beside=False)
        assert plan == pool.WorkerPlan(1, fork=False)
        with workers.Decoding(files, plan) as decoding:     # a fresh interpreter instead, same answers
            assert [decoding.take(f).meta.source for f in files] == [str(f) for f in files]
    finally:
        stop.set()
        t.join()


def test_jobs_rules(monkeypatch, tmp_path, kind):
    small = sorted((SAMPLES / "wfbp_100").glob("rank*"))
    monkeypatch.delenv(pool.JOBS_ENV, raising=False)
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)

    def jobs_for(files, jobs=None, beside=False):
        return pool.plan(files, jobs, beside=beside).workers

    assert jobs_for(small, 0) == 0
    assert jobs_for(small, 8) == len(small)       # never more workers than files
    assert jobs_for(small, 8, beside=True) == len(small) - 1      # a report reads one file itself
    # A forked worker starts in a millisecond: worth it from two files. A fresh interpreter is not, below
    # MIN_BYTES of JSON (the samples are far below).
    assert jobs_for(small) == (len(small) if kind == "fork" else 0)
    monkeypatch.setenv(pool.JOBS_ENV, "1")
    assert jobs_for(small) == 1
    monkeypatch.setenv(pool.JOBS_ENV, "many")
    with pytest.raises(UsageError):
        jobs_for(small)


def test_one_file_is_decoded_here_and_several_big_ones_in_workers(monkeypatch):
    # Nothing would run beside one file's worker (the report imports no pandas to overlap it with), and its
    # columns would have to come back: one file is decoded here, however big.
    files = sorted((SAMPLES / "wfbp_100").glob("rank*"))
    monkeypatch.delenv(pool.JOBS_ENV, raising=False)
    monkeypatch.setattr(pool, "json_bytes", lambda f: pool.MIN_BYTES)
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    for spawn in ("", "1"):
        monkeypatch.setenv(pool.SPAWN_ENV, spawn)
        assert pool.plan(files[:1], beside=False).workers == 0
        assert pool.plan(files, beside=False) == pool.WorkerPlan(2, fork=not spawn)


def test_gzip_trailer_gives_the_json_size(tmp_path):
    data = b'{"traceEvents": []}' * 1000
    f = tmp_path / "t.json.gz"
    f.write_bytes(gzip.compress(data))
    assert pool.json_bytes(f) == len(data)       # ISIZE trailer, RFC 1952
    plain = tmp_path / "t.json"
    plain.write_bytes(data)
    assert pool.json_bytes(plain) == len(data)


def test_cli_output_is_the_same_with_and_without_workers():
    folder = SAMPLES / "straggler"
    out = {}
    for jobs in ("0", "2"):
        env = {**os.environ, pool.JOBS_ENV: jobs}
        proc = subprocess.run([sys.executable, "-c", "from tracelens.cli import run; run()", "report", str(folder),
                               "--format", "json"], capture_output=True, env=env)
        assert proc.returncode == 0, proc.stderr.decode()
        out[jobs] = proc.stdout
    assert out["0"] == out["2"] and b'"schema": "tracelens.report/1"' in out["0"]


def test_bad_jobs_setting_is_a_usage_error():
    env = {**os.environ, pool.JOBS_ENV: "-1"}
    proc = subprocess.run([sys.executable, "-c", "from tracelens.cli import run; run()", "report",
                           str(SAMPLES / "straggler")], capture_output=True, text=True, env=env)
    assert proc.returncode == 2 and "TRACELENS_JOBS" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize("jobs", [0, 1])
def test_loaded_tables_can_be_edited(jobs):
    # Notebook use: a user's in-place edit must not hit a read-only array (unpickled worker columns).
    t = tracelens.load(str(SAMPLES / "wfbp_100"), jobs=jobs)[0]
    for name, column in (("device_ops", "start_ns"), ("host_ops", "start_ns"), ("collectives", "device_idx"),
                         ("steps", "start_ns")):
        frame = getattr(t, name)
        frame[column][0] = 5
        assert frame[column][0] == 5, name


@pytest.mark.single_thread
def test_a_bug_in_a_forked_worker_falls_back_to_decoding_here(monkeypatch):
    # A failure that is not an InputError (a bug, MemoryError) is answered as "failed" with its traceback;
    # take() then gives None and the caller decodes the file in this process, where the bug shows itself.
    monkeypatch.delenv(pool.SPAWN_ENV, raising=False)
    assert pool.can_fork()
    good, bad = sorted((SAMPLES / "wfbp_100").glob("rank*.json.gz"))
    from tracelens.parsers import kineto

    real = kineto.decode_file

    def buggy(path, keep_alive=None):
        if Path(path) == bad:
            raise RuntimeError("a bug in the decoder")
        return real(path, keep_alive)

    monkeypatch.setattr(kineto, "decode_file", buggy)      # the forked child inherits the patch
    with _decoding([bad, good], 1) as decoding:
        assert decoding.take(bad) is None
        # The worker lived on (a dead one would answer nothing more): the next file still comes from it.
        assert decoding.take(good).meta.source == str(good)
