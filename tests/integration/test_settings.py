"""Configured versus observed: settings a run directory's manifest records (environment, command line)
beside what the trace shows, on generated runs whose answer is known and the real gloo recordings."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

import tracelens
from tracelens.analyzers.rank.settings import check
from tracelens.parsers.rundir import command_settings

from conftest import SAMPLES
from fixtures import synth
from fixtures.synth import layout


def _manifest(folder, ranks, env=None, command=None):
    (folder / "manifest.json").write_text(json.dumps({
        "schema": "tracelens.manifest/1", "command": command or ["torchrun", "train.py"],
        "ranks": [{"rank": r, "env": env or {}} for r in ranks]}))


def _checks(rep, rank=0):
    return {c.name: c for c in next(r for r in rep.ranks if r.rank == rank).settings}


def _mismatches(rep):
    return {(d.rank, d.evidence["setting"]) for d in rep.diagnoses if d.id == "config-mismatch"}


@pytest.mark.parametrize("cap, contradiction", [
    # wfbp_sized: buckets of 1, 32, 32, 32 MiB. A cap of 32 makes 1 + 96 / 32 = 4 buckets: agrees; a cap of
    # 8 would make 1 + 12 = 13 and never a 32 MiB bucket (more than twice 8)
    ("32", None), ("8", "the largest bucket is more than twice the cap")])
def test_bucket_cap_from_the_command_line(tmp_path, cap, contradiction):
    synth.write(synth.SCENARIOS["wfbp_sized"], tmp_path)
    _manifest(tmp_path, [0, 1], command=["torchrun", "train.py", "--bucket-cap-mb", cap])
    rep = tracelens.analyze(tracelens.load(str(tmp_path)))
    c = _checks(rep)["bucket_cap_mb"]
    assert (c.configured, c.source, c.observed, c.contradiction) == (
        cap, "command line", "4 buckets per step, the largest 32.00 MiB", contradiction)
    assert _mismatches(rep) == ({(0, "bucket_cap_mb"), (1, "bucket_cap_mb")} if contradiction else set())


@pytest.mark.parametrize("value, algo_ok, proto_ok", [
    # the generator's all-reduce kernel: ncclDevKernel_AllReduce_Sum_f32_RING_LL -> RING, LL
    ({"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL,LL128"}, True, True),
    ({"NCCL_ALGO": "Tree", "NCCL_PROTO": "^LL"}, False, False),
    ({"NCCL_ALGO": "^NVLS", "NCCL_PROTO": "Simple"}, True, False),
])
def test_nccl_algorithm_and_protocol_against_the_kernel_names(tmp_path, value, algo_ok, proto_ok):
    synth.write(synth.SCENARIOS["compute_bound_8"], tmp_path)
    _manifest(tmp_path, [0, 1], env=value)
    rep = tracelens.analyze(tracelens.load(str(tmp_path)))
    checks = _checks(rep)
    assert (checks["NCCL_ALGO"].observed, checks["NCCL_PROTO"].observed) == ("RING", "LL")
    agrees = (checks["NCCL_ALGO"].contradiction is None, checks["NCCL_PROTO"].contradiction is None)
    assert agrees == (algo_ok, proto_ok)


@pytest.mark.parametrize("conn, fsdp, problem", [
    ("8", False, "tensor/context-parallel"),     # TP on an H100 with 8 connections
    # with 1, as Megatron's TP wants: but the layout runs expert parallel (and FSDP) too, which want more
    ("1", False, "FSDP and expert-parallel"),
    ("1", True, "FSDP and expert-parallel"),
])
def test_max_connections_against_the_dimensions(tmp_path, conn, fsdp, problem):
    layout.write(tmp_path, ranks=[0], named=True, fsdp=fsdp)
    _manifest(tmp_path, [0], env={"CUDA_DEVICE_MAX_CONNECTIONS": conn})
    rep = tracelens.analyze(tracelens.load(str(tmp_path)))
    c = _checks(rep)["CUDA_DEVICE_MAX_CONNECTIONS"]
    dims = "fsdp, tp, pp, ep" if fsdp else "dp, tp, pp, ep"
    assert (c.configured, c.observed) == (conn, f"communication: {dims}")
    assert c.contradiction.startswith(problem)
    assert _mismatches(rep) == {(0, "CUDA_DEVICE_MAX_CONNECTIONS")}


def test_max_connections_agrees_with_tensor_parallel_alone(tmp_path):
    # The rule on its own (every generated layout also runs EP): TP with 1 connection and nothing that
    # wants more agrees
    meta = SimpleNamespace(command={}, env={"CUDA_DEVICE_MAX_CONNECTIONS": "1"})
    empty = {k: np.array([], dtype=object) for k in ("op", "step", "bytes")}

    def ctx(device_name):       # what check reads of a RankContext: no collective, no kernel name
        return SimpleNamespace(trace=SimpleNamespace(meta=meta), device_name=device_name, comm=empty,
                               exposure={"name": np.array([], dtype=object)})

    (c,) = check(ctx("NVIDIA H100 80GB HBM3"), ["tp", "pp"], None, np.array([], dtype=object))
    assert c.contradiction is None
    # 8 connections on a B200: Blackwell keeps TP overlap without the launch-order rule
    meta.env["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    (c,) = check(ctx("NVIDIA B200"), ["tp"], None, np.array([], dtype=object))
    assert c.contradiction is None


def test_real_gloo_runs_show_their_bucket_cap_beside_the_buckets():
    # The recordings' manifests: --bucket-cap-mb 0.25 (8 gloo all-reduces a step) and 100 (one)
    for folder, cap, observed in (("gloo_sawtooth", "0.25", "8 buckets per step"),
                                  ("gloo_one_bucket", "100", "1 bucket per step")):
        rep = tracelens.analyze(tracelens.load(str(SAMPLES / folder)))
        for r in rep.ranks:
            (c,) = r.settings
            assert (c.name, c.configured, c.observed, c.contradiction) == ("bucket_cap_mb", cap, observed, None)


def test_command_settings():
    assert command_settings(["python", "t.py", "--bucket_cap_mb=25"]) == {"bucket_cap_mb": "25"}
    assert command_settings(["python", "t.py", "--bucket-cap-mb", "0.25"]) == {"bucket_cap_mb": "0.25"}
    assert command_settings(["python", "t.py", "--bucket-cap-mb"]) == {}
    assert command_settings("not a list") == {}
