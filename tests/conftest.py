"""Shared fixtures: the shared corpus (skipped cleanly when absent) and small trace builders."""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT.parent / "shared" / "corpus"
SAMPLES = ROOT / "sample_traces"
TRAIN = str(ROOT / "examples" / "ddp_train.py")       # the small DDP job the collector tests run
# CI sets this: a corpus test that would skip (corpus or one of its files missing) fails instead.
REQUIRE_CORPUS = bool(os.environ.get("TRACELENS_REQUIRE_CORPUS"))
CORPUS_SKIP = "shared corpus"


def pytest_configure(config):
    if REQUIRE_CORPUS and not CORPUS.is_dir():
        raise pytest.UsageError(f"TRACELENS_REQUIRE_CORPUS is set but the {CORPUS_SKIP} is not at {CORPUS}")
    # Every test, and every tracelens process a test starts, caches into a fresh folder of this session: the
    # suite never writes to the user's ~/.cache, and no result depends on what an earlier run left there.
    # The cache stays on, so that every report the suite runs also goes through it.
    global _CACHE_ROOT
    _CACHE_ROOT = tempfile.mkdtemp(prefix="tracelens-test-cache-")
    os.environ["TRACELENS_CACHE"] = _CACHE_ROOT
    os.environ.pop("TRACELENS_NO_CACHE", None)
    os.environ.pop("TRACELENS_CACHE_MAX", None)
    # Text goes where a pipe's would (160 columns) unless a test says otherwise: pytest-xdist starts its
    # workers with COLUMNS=80, which every report in them would then fit.
    os.environ.pop("COLUMNS", None)
    os.environ.pop("LINES", None)


def pytest_unconfigure(config):
    if _CACHE_ROOT:
        shutil.rmtree(_CACHE_ROOT, ignore_errors=True)


_CACHE_ROOT = ""


def pytest_collection_modifyitems(config, items):
    """Tests marked single_thread run first: tracelens forks its decode workers only while its process runs
    one thread, and a test that starts Dask leaves a thread behind for the rest of the session (its
    offload executor). Every e2e test is slow too: a real job under torchrun, timed, in CI's one-process pass."""
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("slow"):
            item.add_marker(pytest.mark.slow)
    first = [i for i in items if i.get_closest_marker("single_thread")]
    items[:] = first + [i for i in items if not i.get_closest_marker("single_thread")]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under TRACELENS_REQUIRE_CORPUS a skip for want of the corpus is a failure, wherever it was raised."""
    outcome = yield
    rep = outcome.get_result()
    if REQUIRE_CORPUS and rep.skipped and isinstance(rep.longrepr, tuple) and CORPUS_SKIP in str(rep.longrepr[2]):
        rep.outcome = "failed"
        rep.longrepr = f"TRACELENS_REQUIRE_CORPUS is set: {rep.longrepr[2]}"


def corpus_file(rel: str) -> Path:
    """A corpus file, or a skip with the reason when the shared corpus is not beside the project."""
    path = CORPUS / rel
    if not CORPUS.is_dir():
        pytest.skip(f"{CORPUS_SKIP} not found at {CORPUS} (it ships only beside the project, not in a clone)")
    if not path.exists():
        pytest.skip(f"{CORPUS_SKIP} file {rel} is missing")
    return path


def write_trace(path: Path, events: list[dict], gz: bool = False, **top) -> Path:
    """Write a minimal Kineto document with the given events."""
    doc = {"schemaVersion": 1, **top, "traceEvents": events}
    data = json.dumps(doc).encode()
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def kernel(name, ts, dur, stream=7, corr=None, device=0, cat="kernel", **args):
    a = {"device": device, "stream": stream, **args}
    if corr is not None:
        a["correlation"] = corr
    return {"ph": "X", "cat": cat, "name": name, "pid": device, "tid": stream, "ts": ts, "dur": dur, "args": a}


def host(name, ts, dur, cat="cpu_op", pid=100, tid=100, **args):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": args}


def needs_torch():
    """Skip (fail under TRACELENS_REQUIRE_E2E, as in CI) when torch or torchrun is not there to run real jobs."""
    import importlib.util
    import sys

    if importlib.util.find_spec("torch") is None:
        if os.environ.get("TRACELENS_REQUIRE_E2E"):
            pytest.fail("TRACELENS_REQUIRE_E2E is set but torch is not importable")
        pytest.skip("torch is not installed (pip install torch==2.13.0 for the end-to-end collector tests)")
    if not (Path(sys.executable).parent / "torchrun").exists():
        pytest.skip(f"torchrun is not next to {sys.executable}")


CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"


def needs_browser():
    """Skip (fail under TRACELENS_REQUIRE_BROWSER, as in CI) without Debian's chromium and chromium-driver, or
    without selenium and the dashboard extra."""
    import importlib.util

    missing = [p for p in (CHROMIUM, CHROMEDRIVER) if not Path(p).exists()]
    missing += [m for m in ("selenium", "dash", "plotly", "dash_ag_grid") if importlib.util.find_spec(m) is None]
    if missing:
        why = (f"the browser tests need {', '.join(missing)} (apt-get install chromium chromium-driver; "
               "pip install -e '.[test]')")
        if os.environ.get("TRACELENS_REQUIRE_BROWSER"):
            pytest.fail(f"TRACELENS_REQUIRE_BROWSER is set but {why}")
        pytest.skip(why)


@contextlib.contextmanager
def running_dashboard(*args: str, stderr=subprocess.STDOUT):
    """The real `tracelens dashboard ARGS` on a free port of 127.0.0.1, as a user starts it, once it answers;
    yields (its process, its URL). Stopped (SIGTERM) on leaving, when still running: its output, (stdout,
    stderr), is then ``proc.output``."""
    import socket
    import sys
    import time
    import urllib.request

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-c", "from tracelens.cli import run; run()", "dashboard", *args,
                             "--port", str(port)], stdout=subprocess.PIPE, stderr=stderr, text=True)
    url = f"http://127.0.0.1:{port}/"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(url, timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(f"the dashboard did not start: {proc.communicate()}") from None
                time.sleep(0.3)
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
            proc.output = proc.communicate(timeout=10)


# Every corpus trace the whole-corpus checks read (the claims audit, the outliers): the Kineto traces and
# nsys exports of ../shared/corpus, one per capture.
CORPUS_TRACES = ["hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
                 "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
                 "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
                 "hta/critical_path/cuda_event_sync_multi_stream/event_sync_trace.json.gz",
                 "hta/df_index_resolver/df_index_resolver.json.gz",
                 "hta/distributed_info_unavailable/distributed_info_not_found.json.gz",
                 "hta/nccl_parser_config/nccl_data.json.gz",
                 "hta/negative_queue_length_values_check/rank0.json.gz",
                 "hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
                 "hta/trace_filter/sampled_rank-0.json.gz", "hta/trace_filter/sampled_rank-1.json.gz",
                 "kineto_misc/kineto_tb_plugin_resnet50_2021/worker0.1623143089861.pt.trace.json.gz",
                 "kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
                 "kineto_misc/kineto_unit_test_cuda_sync/kineto_before_fix_trace.json",
                 "kineto_misc/param_single_gpu/linear_kineto.json.gz", "kineto_misc/param_single_gpu/resnet_kineto.json.gz",
                 "nsys/extrap/con_kernel.sqlite", "nsys/extrap/concurrent_s16_profile16.sqlite",
                 "nsys/extrap/ex-gpu.s10.sqlite",
                 "nsys/nsys-ai/h100_2gpu_1s.sqlite", "nsys/nsys-ai/healthy_1pct_minimal.sqlite",
                 "nsys/nsys-ai/mfu_2gpu_before.sqlite", "nsys/nsys-ai/mock_rtx3080.sqlite",
                 "nsys/pipit/saxpy-mpi-cuda_nsys_perlmutter0.sqlite", "tracelens_amd/b200/eager_trace.json.gz"]
