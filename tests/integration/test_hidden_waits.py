"""A straggler whose wait no one feels (issue 45, item 3): two ranks, two all-gathers a step under 10 ms of
compute; rank 0 starts them 1.5 ms and 0.75 ms after rank 1 and they end together, so rank 1 waits 2.25 ms
per step (the generator's plan below), all of it while its compute runs: its exposed wait is 0 and no step
would be shorter if rank 0 came on time. docs/metrics.md, "Stragglers" and "What fixing a cause saves"."""

from __future__ import annotations

import pytest

import tracelens

from fixtures.synth.families import GEMM, Doc, coll_args, nccl_scope

AG = "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
STEPS, STEP_US = 6, 12_000
PLAN = [(2000, 500, 2500), (6000, 5250, 6500)]   # per all-gather: rank 0's start, rank 1's, their end (µs)


def write(tmp_path, compute_us: int = 10_000):
    for rank in (0, 1):
        d = Doc(rank)
        for k in range(STEPS):
            t = 1000 + k * STEP_US
            d.step(k, t, t + STEP_US - 500)
            d.launch(t + 10, GEMM, t + 50, compute_us)
            for i, (s0, s1, end) in enumerate(PLAN):
                s = s0 if rank == 0 else s1
                d.launch(t + s - 40, AG, t + s, end - s, stream=21, scope=nccl_scope("all_gather"),
                         op="aten::empty", device_args={**coll_args("allgather"), "Seq": 2 * k + i})
        d.write(tmp_path / f"rank{rank}.json")
    return tracelens.report(str(tmp_path), cache=False)


def test_a_hidden_wait_is_no_warning_and_promises_nothing(tmp_path):
    rep = write(tmp_path)
    (d,) = [d for d in rep.diagnoses if d.id == "straggler"]
    # Rank 0 is still the rank waited for (what happened), but what it costs is the exposed wait: none.
    assert d.rank == 0 and d.evidence["wait_per_step_ns"] == 2_250_000
    assert d.evidence["impact_ns"] == 0 and d.severity == "info" and not d.evidence["material"]
    pw = next(c for c in rep.verdict.causes if c.cause == "peer-wait")
    assert pw.culprit is not None and pw.culprit.rank == 0
    # Nothing to save and no lever: the cause is material on no rank.
    assert (pw.saving_ns, pw.ranks, pw.lever) == (0, [], "")
    assert rep.verdict.headline.startswith("Communication is not what holds the steps up")


def test_the_same_wait_exposed_is_a_warning_with_its_saving(tmp_path):
    """The control: with 1 ms of compute per step (50-1050 µs) rank 1's waits (500-2000 and 5250-6000 µs)
    run past it: 0.95 + 0.75 = 1.7 ms of them exposed per step, by hand. A warning, and rank 0's coming on
    time saves up to them."""
    rep = write(tmp_path, compute_us=1_000)
    (d,) = [d for d in rep.diagnoses if d.id == "straggler"]
    assert d.severity == "warning" and d.evidence["impact_ns"] == 1_700_000
    pw = next(c for c in rep.verdict.causes if c.cause == "peer-wait")
    assert pw.lever.startswith("rank 0: ") and pw.ranks == [1]
    assert 0 < pw.saving_ns <= d.evidence["impact_ns"]
