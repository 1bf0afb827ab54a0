"""Memory copy and set time per step (copy_ns, memcpy_ns, memset_ns) and the memcpy-bound finding."""

from __future__ import annotations

import sqlite3

import pytest

import tracelens
from tracelens.analyzers import Thresholds
from tracelens.renderers import render

from conftest import corpus_file, host, kernel, write_trace
from fixtures import synth

MS = 1_000_000


def report(sc, tmp_path, fmt="kineto"):
    out = tmp_path / fmt
    (synth.write if fmt == "kineto" else synth.write_nsys)(sc, out)
    return tracelens.analyze(tracelens.load(str(out)))


def _copy_events(extra=()):
    # Hand-made (µs), step 1 span [0, 1000): an HtoD copy [20, 720) on stream 7, a memset [720, 760) on
    # stream 7, a DtoD copy [700, 740) on stream 9 (overlapping both), then a kernel [760, 960).
    return [host("ProfilerStep#1", 0, 1000, cat="user_annotation"),
            host("cudaMemcpyAsync", 10, 2, cat="cuda_runtime", correlation=1),
            kernel("Memcpy HtoD (Pinned -> Device)", 20, 700, corr=1, cat="gpu_memcpy"),
            host("cudaMemsetAsync", 12, 2, cat="cuda_runtime", correlation=2),
            kernel("Memset (Device)", 720, 40, corr=2, cat="gpu_memset"),
            host("cudaMemcpyAsync", 14, 2, cat="cuda_runtime", correlation=3),
            kernel("Memcpy DtoD (Device -> Device)", 700, 40, stream=9, corr=3, cat="gpu_memcpy"),
            host("cudaLaunchKernel", 16, 2, cat="cuda_runtime", correlation=4), kernel("k", 760, 200, corr=4),
            *extra]


def test_copy_time_per_step(tmp_path):
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", _copy_events()))))
    (s,) = rep.ranks[0].steps
    # copies ∪ sets = [20, 760) = 740 µs; copies alone [20, 740) = 720 µs; the memset [720, 760) = 40 µs.
    assert (s.copy_ns, s.memcpy_ns, s.memset_ns) == (740_000, 720_000, 40_000)
    assert (s.duration_ns, s.compute_ns, s.idle_ns) == (1_000_000, 200_000, 60_000)   # 1000 - 740 - 200
    t = rep.ranks[0].totals
    assert (t.copy_ns, t.memcpy_ns, t.memset_ns) == (740_000, 720_000, 40_000)
    # Copies nothing overlapped fill 74 % of the step: at least half, below the 80 % of a critical one.
    (d,) = [d for d in rep.diagnoses if d.id == "memcpy-bound"]
    assert (d.severity, d.step) == ("warning", 1)
    assert d.evidence["exposed_copy_ns"] == 740_000 and d.evidence["copy_fraction"] == pytest.approx(0.74)
    assert d.evidence["by_direction"] == {"HtoD": 700_000, "DtoD": 40_000, "memset": 40_000}
    assert "pin_memory=True" in d.advice and "non_blocking=True" in d.advice
    assert "74.0 %" in d.title and "host-to-device 0.700 ms" in d.detail
    crit = tracelens.analyze(tracelens.load(str(tmp_path / "r.json")), Thresholds(copy_critical_fraction=0.7))
    assert [d.severity for d in crit.diagnoses if d.id == "memcpy-bound"] == ["critical"]
    assert "memory copies fill 74.0 % of the step" in render(rep, "text")


def test_copies_hidden_under_compute_are_not_a_finding(tmp_path):
    # The same step with a compute kernel on stream 11 running [10, 770): every copy runs under it.
    hidden = [host("cudaLaunchKernel", 5, 2, cat="cuda_runtime", correlation=5),
              kernel("side", 10, 760, stream=11, corr=5)]
    rep = tracelens.analyze(tracelens.load(str(write_trace(tmp_path / "r.json", _copy_events(hidden)))))
    (s,) = rep.ranks[0].steps
    assert s.copy_ns == 740_000
    assert [d for d in rep.diagnoses if d.id == "memcpy-bound"] == []


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_item_copies_counted_the_same_from_kineto_and_nsys(fmt, tmp_path):
    # item_mid_backward: one 2 µs DtoH copy per step (generator: the .item() copy after bucket 3).
    sc = synth.SCENARIOS["item_mid_backward"]
    rep = report(sc, tmp_path, fmt)
    for r in rep.ranks:
        assert [(s.copy_ns, s.memcpy_ns, s.memset_ns) for s in r.steps] == [(2_000, 2_000, 0)] * sc.steps
        assert r.totals.copy_ns == 2_000 * sc.steps
    assert not [d for d in rep.diagnoses if d.id == "memcpy-bound"]


def _union_ns(rows):
    total, reach = 0, None
    for s, e in sorted(rows):
        if reach is None or s > reach:
            total, reach = total + (e - s), e
        elif e > reach:
            total, reach = total + (e - reach), e
    return total


def test_h100_export_whose_step_is_host_to_device_copies():
    # corpus nsys-ai/h100_2gpu_1s: a 969 ms window (no steps: one whole-trace window) that is ~940 ms of copies.
    path = corpus_file("nsys/nsys-ai/h100_2gpu_1s.sqlite")
    rep = tracelens.analyze(tracelens.load(str(path)))
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    for r in rep.ranks:
        (s,) = r.steps
        copies = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = ?",
                             (r.device,)).fetchall()
        sets = con.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE deviceId = ?",
                           (r.device,)).fetchall()
        assert s.memcpy_ns == _union_ns(copies) and s.memset_ns == _union_ns(sets)
        assert s.copy_ns == _union_ns(copies + sets)
        assert s.copy_ns > 0.96 * s.duration_ns > 930 * MS
        (d,) = [d for d in rep.diagnoses if d.id == "memcpy-bound" and d.rank == r.rank]
        assert d.severity == "critical" and d.step is None
        assert max(d.evidence["by_direction"], key=d.evidence["by_direction"].get) == "HtoD"
        assert "pin_memory=True" in d.advice
        # The steps-less window still holds the work launched before this trimmed window (1,138 activities).
        assert r.pre_capture is not None and r.pre_capture.start_ns >= s.start_ns
    con.close()


def test_no_copy_finding_without_copies(tmp_path):
    rep = report(synth.SCENARIOS["wfbp_100"], tmp_path)
    assert all(s.copy_ns == 0 for r in rep.ranks for s in r.steps)
    assert not [d for d in rep.diagnoses if d.id == "memcpy-bound"]
