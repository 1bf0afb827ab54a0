"""A step whose collectives were issued during compute is never two-phase (issue 45, item 1): two-phase says
the communication waited for the end of compute (one bucket, no_sync), and its levers (bucket_cap_mb, no_sync)
act only on collectives issued there. Generated: five 2 ms compute kernels, launched at 0, 2, 4, 6 and 8 ms
(each 10 µs before it starts); all-reduces launched at 2.5, 4.5, 6.5 and 8.5 ms, so the first three were
issued while compute was still being issued; their kernels start at 10.5, 12, 13.5 and 15 ms (1 ms each,
never the moment the one before ended: not a queue). All of the communication runs after compute."""

from __future__ import annotations

import tracelens

from fixtures.synth.families import GEMM, NCCL_AR, Doc, coll_args, nccl_scope

US = 1_000
AR_LAUNCH_US, AR_START_US = (2500, 4500, 6500, 8500), (10500, 12000, 13500, 15000)


def write(tmp_path, launch_us=AR_LAUNCH_US):
    d = Doc(0, world=1)
    for k in range(3):
        t = 1000 + k * 20_000
        d.step(k, t, t + 18_000)
        for i in range(5):
            d.launch(t + 2000 * i, GEMM, t + 2000 * i + 10, 2000)
        for i, (at, start) in enumerate(zip(launch_us, AR_START_US)):
            d.launch(t + at, NCCL_AR, t + start, 1000, stream=13, scope=nccl_scope("all_reduce", group=1),
                     op="aten::empty", device_args=coll_args(group=1))
    d.write(tmp_path / "rank0.json")
    return tracelens.report(str(tmp_path), cache=False)


def test_collectives_issued_during_compute_and_run_after_it_are_not_two_phase(tmp_path):
    rep = write(tmp_path)
    for s in rep.ranks[0].steps:
        assert s.pattern == "partial"                   # was two-phase: all of it after compute
    f = next(d for d in rep.diagnoses if d.id == "overlap-pattern")
    assert (f.evidence["issued_in_compute"], f.evidence["comm_kernels"], f.evidence["queued"]) == (3, 4, 0)
    assert f.evidence["tail_fraction"] == 1.0
    assert f.title == "partial overlap: collectives issued during compute run after it"
    assert "bucket_cap_mb" not in f.advice and "issued in time and held up after" in f.advice


def test_collectives_issued_after_compute_are_two_phase(tmp_path):
    """The control: the same kernels, every all-reduce launched after the last compute launch (at 8.2 to
    8.5 ms): communication issued at the end of compute is two-phase, as before."""
    rep = write(tmp_path, launch_us=(8200, 8300, 8400, 8500))
    assert {s.pattern for s in rep.ranks[0].steps} == {"two-phase"}
    f = next(d for d in rep.diagnoses if d.id == "overlap-pattern")
    assert f.evidence["issued_in_compute"] == 0
