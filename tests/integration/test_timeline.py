"""The step timeline drill-down (api.step_timeline): one rank's file is read, and its lanes add up to that
step's metrics in the Report."""

from __future__ import annotations

import pytest

import tracelens
from tracelens import api
from tracelens.analyzers import intervals as iv
from tracelens.errors import InputError, UsageError

from conftest import SAMPLES

SAMPLE = SAMPLES / "wfbp_100"


@pytest.fixture(scope="module")
def rep():
    return tracelens.report(str(SAMPLE))


def _length(tl, kind) -> int:
    spans = [ln.spans[kind] for ln in tl.lanes if kind in ln.spans]
    import numpy as np
    return iv.length(iv.union(np.concatenate([s for s, _ in spans]), np.concatenate([e for _, e in spans])))


def test_lanes_add_up_to_the_step_metrics(rep):
    tl = api.step_timeline(rep, 1, 3)
    st = next(s for s in rep.ranks[1].steps if s.step == 3)
    assert (tl.rank, tl.step, tl.start_ns, tl.end_ns) == (1, 3, st.start_ns, st.end_ns)
    # the Report's own numbers for this step (wfbp_100 truth: 12 ms comm, 2.1 ms exposed)
    assert _length(tl, "compute") == st.compute_ns
    assert _length(tl, "comm") == st.comm_ns == 12_000_000
    assert iv.length(tl.exposed) == st.exposed_comm_ns == 2_100_000
    assert tl.merged_below_ns == 0 and tl.source.endswith("rank1.json.gz")


def test_only_the_ranks_own_file_is_read(rep, monkeypatch):
    seen = []
    real = api.load
    monkeypatch.setattr(api, "load", lambda paths, **kw: seen.append(list(paths)) or real(paths, **kw))
    api.step_timeline(rep, 0, 2)
    assert [[p.name for p in paths] for paths in seen] == [["rank0.json.gz"]]


def test_too_many_shapes_are_merged_below_a_pixel(rep):
    tl = api.step_timeline(rep, 1, 3, max_shapes=10)
    assert tl.merged_below_ns == (tl.end_ns - tl.start_ns) // 2000 and tl.shapes <= 10
    st = next(s for s in rep.ranks[1].steps if s.step == 3)
    # merging only fills gaps: nothing that was busy becomes idle
    assert _length(tl, "comm") >= st.comm_ns


def test_unknown_rank_step_or_missing_trace(rep, tmp_path):
    with pytest.raises(UsageError):
        api.step_timeline(rep, 7, 3)
    with pytest.raises(UsageError):
        api.step_timeline(rep, 0, 99)
    moved = tracelens.contract.Report.from_json(rep.to_json())
    for i in moved.inputs:
        i.path = str(tmp_path / "gone" / "rank.json.gz")
    with pytest.raises(InputError, match="not here"):
        api.step_timeline(moved, 0, 2)


def test_each_activity_keeps_its_name_for_the_hover(rep):
    pytest.importorskip("plotly", reason="the dashboard extra (plotly) is not installed")
    from tracelens.renderers.timeline_figure import timeline_bars

    tl = api.step_timeline(rep, 1, 3)
    comm = next(b for b in timeline_bars(tl) if b["kind"] == "comm")
    # wfbp_100: 100 NCCL all-reduce kernels per step, their template arguments escaped for plotly's hover
    assert len(comm["names"]) == len(comm["start_ms"]) == 100
    assert comm["names"][0].startswith("ncclDevKernel_AllReduce") and "&lt;4096ul&gt;" in comm["names"][0]


def test_the_wait_for_peers_apart_from_the_transfer():
    # The straggler sample: rank 0 waits for rank 3 at each of its 6 all-reduces of a step, then moves data for
    # 1 ms (generator); rank 3, the last to arrive, only transfers. The lane's parts sum to the Report's own
    # per-step wait and transfer (wall time: one comm stream, so the parts never overlap).
    from tracelens.renderers.timeline_figure import PEER_LANE, peer_bars

    rep = tracelens.report(str(SAMPLES / "straggler"))
    for rank, waits in ((0, 6), (3, 0)):
        tl = api.step_timeline(rep, rank, 3)
        bars = {b["kind"]: b for b in peer_bars(rep, tl)}
        assert all(b["lane"] == PEER_LANE for b in bars.values())
        step = next(s for s in rep.ranks[rank].steps if s.step == 3)
        assert len(bars.get("wait for peers", {"dur_ms": []})["dur_ms"]) == waits
        assert sum(bars.get("wait for peers", {"dur_ms": [0]})["dur_ms"]) == pytest.approx(step.wait_ns * 1e-6)
        assert len(bars["transfer"]["dur_ms"]) == 6
        assert sum(bars["transfer"]["dur_ms"]) == pytest.approx(step.transfer_ns * 1e-6)
