"""What the text and Markdown reports show of the Report: each key they format is checked against the
Report's own value (the renderers format, they never compute)."""

from __future__ import annotations

import pytest

import tracelens
from tracelens.renderers import render

from conftest import SAMPLES, host, kernel, write_trace

WIDTHS = (80, 120)


def report(path):
    return tracelens.analyze(tracelens.load(str(path)))


def text(rep, width: int = 80) -> str:
    return render(rep, "text", width=width)


def markdown(rep) -> str:
    return render(rep, "markdown")


def finding_lines(rep, id_: str) -> tuple[list[str], list[str]]:
    """The heading line of every finding with this id, in the text (80 and 120 columns; a heading may wrap,
    its start does not) and the Markdown."""
    starts = [d.title[:12] for d in rep.diagnoses if d.id == id_]
    assert starts, f"no {id_} finding in the report"
    texts = [line for w in WIDTHS for line in text(rep, w).splitlines()
             if line.startswith(("INFO ", "WARNING ", "CRITICAL ")) and any(f" · {t}" in line for t in starts)]
    mds = [line for line in markdown(rep).splitlines()
           if line.startswith("- ") and any(f" · **{t}" in line for t in starts)]
    return texts, mds


# ------------------------------------------------------------------------ findings without a step


def test_straggler_is_labelled_across_ranks():
    # The straggler sample: rank 3 runs its compute 1.3x slower (generator); the finding compares it with
    # the other ranks, so it has no step although every rank has steps 2-4.
    rep = report(SAMPLES / "straggler")
    (d,) = [d for d in rep.diagnoses if d.id == "straggler"]
    assert d.step is None and d.rank == 3 and [s.step for s in rep.ranks[3].steps] == [2, 3, 4]
    texts, mds = finding_lines(rep, "straggler")
    assert len(texts) == 2 and len(mds) == 1
    assert all(line.startswith("WARNING rank 3 · across ranks · straggler: ") for line in texts), texts
    assert mds[0].startswith("- ⚠️ **warning** · rank 3 · across ranks · **straggler: "), mds
    assert "whole trace" not in text(rep) and "whole trace" not in markdown(rep)


def _nccl_cpu_only(path, steps: bool):
    # A DDP step recorded with CPU activity only: torch's nccl:all_reduce scopes, no kernel anywhere.
    step = [host("ProfilerStep#3", 0, 1000, cat="user_annotation")] if steps else []
    return write_trace(path, step + [
        host("aten::mm", 10, 400), host("nccl:all_reduce", 500, 20, cat="user_annotation"),
        host("nccl:all_reduce", 600, 20, cat="user_annotation")],
        deviceProperties=[{"id": 0, "name": "NVIDIA H100 80GB HBM3"}])


@pytest.mark.parametrize("steps, label", [(True, "whole rank"), (False, "whole trace")])
def test_no_gpu_activity_is_labelled_by_the_ranks_steps(tmp_path, steps, label):
    # With ProfilerStep#3 the rank has step 3, and the finding (step null) is about the whole rank, not a
    # trace without steps; without any ProfilerStep the one window is the whole trace.
    rep = report(_nccl_cpu_only(tmp_path / "rank0.json", steps))
    (d,) = [d for d in rep.diagnoses if d.id == "no-gpu-activity"]
    assert d.step is None
    assert [s.step for s in rep.ranks[0].steps] == ([3] if steps else [None])
    texts, mds = finding_lines(rep, "no-gpu-activity")
    assert texts and all(line.startswith(f"WARNING rank 0 · {label} · no GPU activity") for line in texts), texts
    assert mds and all(f"· rank 0 · {label} · **no GPU activity" in line for line in mds), mds


def test_findings_of_a_trace_without_steps_say_whole_trace(tmp_path):
    # No ProfilerStep: one window (step null). A 1 ms GEMM, then a 1 ms all-reduce alone after it: two-phase
    # with 1 ms exposed; its overlap-pattern finding covers the whole trace.
    path = write_trace(tmp_path / "rank0.json", [
        kernel("sm90_gemm", 0, 1000), kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 1000, 1000, stream=13)])
    rep = report(path)
    (d,) = [d for d in rep.diagnoses if d.id == "overlap-pattern"]
    assert d.step is None and [s.step for s in rep.ranks[0].steps] == [None]
    texts, mds = finding_lines(rep, "overlap-pattern")
    assert texts and all(" rank 0 · whole trace · " in line for line in texts), texts
    assert mds and all(" rank 0 · whole trace · " in line for line in mds), mds
