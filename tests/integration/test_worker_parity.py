"""A decode worker must give exactly what decoding in this process gives, on every real trace.

The report-level worker tests cannot tell a working worker from a broken one (a worker that fails costs only
time: the file is decoded here instead, and the report is the same). These tests ask the pool itself, and
fail when a worker does not answer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tracelens import pool
from tracelens.parsers import workers
from tracelens.parsers.kineto import decode_file
from tracelens.parsers.kineto.event_columns import DecodedLabels

from conftest import CORPUS, SAMPLES, corpus_file


def _kineto_files() -> list[Path]:
    corpus_file("kineto")          # skips (or fails under TRACELENS_REQUIRE_CORPUS) without the corpus
    found = sorted(p for p in CORPUS.rglob("*.json*") if p.is_file())
    return found + sorted(SAMPLES.glob("*/*.pt.trace.json*"))


def _same(a, b, where: str) -> None:
    if isinstance(a, DecodedLabels):
        assert isinstance(b, DecodedLabels), where
        assert np.array_equal(a.codes, b.codes), where
        assert a.categories == b.categories, where
    elif isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, where


def test_every_trace_decoded_by_a_worker_equals_decoding_here():
    files = _kineto_files()
    assert len(files) > 10
    with workers.Decoding(files, pool.WorkerPlan(2, pool.can_fork())) as decoding:
        for f in files:
            try:
                remote = decoding.take(f)
                remote_error = None
            except Exception as exc:  # an InputError the worker found: the same must be found here
                remote, remote_error = None, exc
            try:
                local = decode_file(f)
            except Exception as exc:
                assert remote_error is not None and type(remote_error) is type(exc) and str(remote_error) == str(exc)
                continue
            assert remote_error is None, f"{f}: the worker raised {remote_error!r}, decoding here did not"
            assert remote is not None, f"{f}: the worker gave no answer (broken worker)"
            assert vars(remote.meta) == vars(local.meta), f"{f}: meta"
            for table in ("device", "host", "threads", "comm_meta"):
                _same(getattr(remote, table), getattr(local, table), f"{f.name}:{table}")


def test_a_broken_worker_is_seen_by_the_pool(monkeypatch):
    """The check above fails when workers are broken: a worker that cannot run answers nothing."""
    monkeypatch.setattr(pool.sys, "executable", "/nonexistent/python")
    f = sorted((SAMPLES / "wfbp_100").glob("rank0*"))[0]
    with workers.Decoding([f], pool.WorkerPlan(1, fork=False)) as decoding:     # a fresh interpreter
        assert decoding.take(f) is None
