"""Invariants of every report, beyond "no crash" (issue 17), as property tests:

- per step, 0 ≤ overlap ≤ comm ≤ duration, exposed = comm − overlap, 0 ≤ idle ≤ duration (docs/metrics.md:
  overlap and comm are lengths of interval sets clipped to the step window, whose length is the duration);
- a clean trace decoded strictly (the whole-file typed decode) and leniently (event by event, the repair
  path) gives the same report;
- the order of the events in the file changes nothing.

Traces are drawn by hypothesis (kernels of random times and lengths on two streams, some communication,
ProfilerStep ranges around them) and taken from the corpus.
"""

from __future__ import annotations

import json
import random

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tracelens.parsers.kineto import decode as kineto_decode

from fixtures.findings import placeless_report
from conftest import corpus_file, write_trace

CORPUS_TRACES = [
    "hta/trace_filter/sampled_rank-0.json.gz",
    "hta/critical_path/alexnet/benchmark_result_2869224_1695835535_trace.json.gz",
    "hta/amd_trace/mi250_minitoy_train_ROCm6_2_kineto.json.gz",
    "hta/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz",
    "kineto_misc/kineto_unit_test_cuda_sync/kineto_after_fix_trace.json",
]


@st.composite
def traces(draw) -> list[dict]:
    """Steps with kernels (compute on stream 7, communication on stream 8) launched from the CPU, in µs."""
    events, corr, t = [], 0, 1000
    for step in range(draw(st.integers(1, 4))):
        length = draw(st.integers(50, 2000))
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1,
                       "ts": t, "dur": length})
        for _ in range(draw(st.integers(0, 6))):
            corr += 1
            comm = draw(st.booleans())
            launch = t + draw(st.integers(0, length))
            start = launch + draw(st.integers(0, 300))
            dur = draw(st.integers(0, 800))
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": launch, "dur": 1, "args": {"correlation": corr}})
            events.append({"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_f32_RING_LL" if comm
                           else f"gemm_{draw(st.integers(0, 3))}", "pid": 0, "tid": 8 if comm else 7, "ts": start,
                           "dur": dur, "args": {"device": 0, "stream": 8 if comm else 7, "correlation": corr}})
        t += length + draw(st.integers(0, 500))
    return events


def check_steps(data: dict) -> None:
    for r in data["ranks"]:
        for s in r["steps"]:
            assert 0 <= s["overlap_ns"] <= s["comm_ns"] <= s["duration_ns"], s
            assert s["exposed_comm_ns"] == s["comm_ns"] - s["overlap_ns"], s
            assert 0 <= s["idle_ns"] <= s["duration_ns"] and 0 <= s["compute_ns"] <= s["duration_ns"], s
            assert s["end_ns"] - s["start_ns"] == s["duration_ns"], s


SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@SETTINGS
@given(events=traces())
def test_step_metrics_are_bounded(tmp_path, events):
    check_steps(placeless_report(write_trace(tmp_path / "r.json", events)))


class _Refuse:
    """Stands in for the whole-file typed decoder: refuses every file, so the per-event path reads it."""

    def decode(self, raw):
        raise msgspec.ValidationError("forced onto the per-event path")


def lenient(path, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        m.setattr(kineto_decode, "DECODER", _Refuse())
        return placeless_report(path)


@SETTINGS
@given(events=traces())
def test_strict_and_lenient_decode_agree_on_clean_traces(tmp_path, monkeypatch, events):
    path = write_trace(tmp_path / "r.json", events)
    assert lenient(path, monkeypatch) == placeless_report(path)


@pytest.mark.parametrize("rel", CORPUS_TRACES)
def test_strict_and_lenient_decode_agree_on_the_corpus(rel, monkeypatch):
    path = corpus_file(rel)
    strict = placeless_report(path)
    assert not {w["code"] for w in strict["warnings"]} & {"malformed-events", "coerced-values"}   # clean
    assert lenient(path, monkeypatch) == strict


@SETTINGS
@given(events=traces(), seed=st.integers(0, 2**32))
def test_event_order_changes_nothing(tmp_path, events, seed):
    shuffled = events[:]
    random.Random(seed).shuffle(shuffled)
    assert (placeless_report(write_trace(tmp_path / "a.json", shuffled))
            == placeless_report(write_trace(tmp_path / "b.json", events)))


@pytest.mark.parametrize("rel", CORPUS_TRACES)
def test_event_order_changes_nothing_on_the_corpus(rel, tmp_path):
    import gzip
    path = corpus_file(rel)
    doc = json.loads(gzip.decompress(path.read_bytes()) if path.name.endswith(".gz") else path.read_bytes())
    clean = placeless_report(path)
    check_steps(clean)
    random.Random(rel).shuffle(doc["traceEvents"])
    (tmp_path / path.name.removesuffix(".gz")).write_text(json.dumps(doc))
    assert placeless_report(tmp_path / path.name.removesuffix(".gz")) == clean


@settings(max_examples=200, deadline=None)
@given(keys=st.integers(1, 60).flatmap(lambda n: st.lists(st.lists(st.integers(0, 3), min_size=n, max_size=n),
                                                          min_size=1, max_size=4)))
def test_fast_lexsort_is_lexsort(keys):
    import numpy as np
    from tracelens.parsers.assemble import _lexsort
    arrays = [np.array(k, dtype=np.int64) for k in keys]
    assert _lexsort(arrays).tolist() == np.lexsort(arrays[::-1]).tolist()
