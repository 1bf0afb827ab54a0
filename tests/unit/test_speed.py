"""The speed tricks of tracelens/_speed.py give what the plain way gives, and their fallbacks do too."""

import gc
import os
import subprocess
import sys

import pytest

from tracelens import _speed


def test_ints_from_text_reads_every_int64_and_stops_at_anything_else():
    values = [0, -1, 2**63 - 1, -2**63, 42]               # both int64 bounds
    assert _speed.ints_from_text(",".join(map(str, values))).tolist() == values
    assert _speed.ints_from_text("").tolist() == []
    for text in ("1,2.5,3", "1,x,3", "1,,3", "1e3,2"):       # 3 or 2 values written, not all integers
        out = _speed.ints_from_text(text)
        assert out is None or len(out) < text.count(",") + 1, text


@pytest.mark.parametrize("enabled", [True, False])
def test_gc_pause_restores_the_collector_state(enabled):
    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(RuntimeError):
            with _speed.no_cyclic_gc():
                assert not gc.isenabled()
                raise RuntimeError("a parser error")
        assert gc.isenabled() == enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_exit_without_teardown_keeps_the_code_and_skips_atexit(tmp_path):
    marker = tmp_path / "atexit-ran"
    code = ("import atexit, pathlib; from tracelens._speed import exit_without_teardown; "
            f"atexit.register(pathlib.Path({str(marker)!r}).touch); exit_without_teardown(5)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 5, proc.stderr
    assert not marker.exists()


BLAS_PROBE = ("import os; from tracelens._speed import one_blas_thread, user_environ; {call}import numpy; "
              "print(len(os.listdir('/proc/self/task')), os.environ.get('OPENBLAS_NUM_THREADS'), "
              "user_environ().get('OPENBLAS_NUM_THREADS'))")


def _probe(call: str, env_extra: dict) -> list[str]:
    # OpenBLAS also reads OMP_NUM_THREADS and GOTO_NUM_THREADS (an earlier test or a CI runner may set one)
    env = {k: v for k, v in os.environ.items()
           if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "GOTO_NUM_THREADS")} | env_extra
    proc = subprocess.run([sys.executable, "-c", BLAS_PROBE.format(call=call)], capture_output=True, text=True,
                          env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="threads counted in /proc/self/task")
def test_one_blas_thread_leaves_numpy_one_thread_and_the_users_environment_alone():
    # numpy loaded after the call: the process runs one thread, and a job would not see the setting.
    assert _probe("one_blas_thread(); ", {}) == ["1", "1", "None"]
    # Without it OpenBLAS starts one thread per core (or whatever count its build caps): more than one here.
    if len(os.sched_getaffinity(0)) > 1:
        threads, *_ = _probe("", {})
        assert int(threads) > 1
    # A count the user chose wins, and a job gets it.
    assert _probe("one_blas_thread(); ", {"OPENBLAS_NUM_THREADS": "3"})[1:] == ["3", "3"]


def test_a_collected_job_gets_the_environment_the_user_had(tmp_path, monkeypatch):
    from tracelens.collectors import launch

    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    monkeypatch.setattr(_speed, "_SET_HERE", set())
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "1")         # as one_blas_thread sets it in the console script
    _speed._SET_HERE.add("OPENBLAS_NUM_THREADS")
    plan = launch.plan(launch.CollectOptions(command=[sys.executable, "-c", "pass"], out=tmp_path / "run"))
    assert "OPENBLAS_NUM_THREADS" not in plan.env and plan.env["NCCL_DEBUG"] == "INFO"
    _speed._SET_HERE.clear()                                  # the user's own setting is passed on
    plan = launch.plan(launch.CollectOptions(command=[sys.executable, "-c", "pass"], out=tmp_path / "run2"))
    assert plan.env["OPENBLAS_NUM_THREADS"] == "1"
