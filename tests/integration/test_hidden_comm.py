"""Communication no kernel name reveals (docs/metrics.md, "Hidden communication"): every family of shared
reference comm-kernels.md as a generated trace, the suggested --comm-pattern taken at its word, and the
corpus traces that must not raise it."""

from __future__ import annotations

import pytest

from tracelens import api
from fixtures.synth import US
from fixtures.synth.families import (FAMILIES, FAMILY_COMM_US, FAMILY_EXPOSED_US, FAMILY_STEPS, Doc, family_doc,
                                     nccl_scope)
from conftest import corpus_file


def _report(tmp_path, doc, **kw):
    return api.report([str(doc.write(tmp_path / "rank0.json"))], **kw)


def _hidden(rep):
    return [d for d in rep.diagnoses if d.id == "hidden-comm"]


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_each_family_is_classified_or_reported(tmp_path, name):
    fam = FAMILIES[name]
    path = family_doc(fam).write(tmp_path / "rank0.json")
    trace = api.load([str(path)])[0]
    ops = trace.device_ops.to_pandas()
    row = ops.index[ops["name"].astype(str) == fam.kernel]
    assert len(row) == FAMILY_STEPS
    kinds = set(ops.loc[row, "kind"].astype(str))
    if fam.comm_kind:
        assert kinds == {"comm"}
        assert set(ops.loc[row, "comm_kind"]) == {fam.comm_kind} and set(ops.loc[row, "rule"]) == {fam.rule}
    else:
        assert kinds == {"compute"}
    rep = api.analyze([trace])
    steps = rep.ranks[0].steps
    # Generator truth: 300 µs of the family's activity a step, 150 µs of it after the last GEMM.
    want = FAMILY_COMM_US * US if fam.comm_kind else 0
    assert [s.comm_ns for s in steps] == [want] * FAMILY_STEPS
    assert [s.exposed_comm_ns for s in steps] == [FAMILY_EXPOSED_US * US if fam.comm_kind else 0] * FAMILY_STEPS
    found = _hidden(rep)
    assert [d.evidence["comm_pattern"] for d in found] == ([fam.pattern] if fam.verdict else [])
    if fam.verdict:
        d = found[0]
        assert (d.severity, d.rank, d.step) == ("warning", 0, None)
        assert d.title.startswith("hidden communication")
        verdict = "no-comm-kernel" if d.title.endswith("no communication on the device") else "look-alike"
        assert verdict == fam.verdict


@pytest.mark.parametrize("name", [n for n, f in sorted(FAMILIES.items()) if f.pattern])
def test_the_suggested_pattern_classifies_exactly_the_hidden_kernels(tmp_path, name):
    fam = FAMILIES[name]
    first = _report(tmp_path, family_doc(fam))
    pattern = _hidden(first)[0].evidence["comm_pattern"]
    assert f"--comm-pattern '{pattern}'" in _hidden(first)[0].advice
    again = _report(tmp_path, family_doc(fam), comm_patterns=[pattern])
    # With it, the family's 300 µs a step are communication (150 µs exposed) and nothing is hidden any more.
    assert [s.comm_ns for s in again.ranks[0].steps] == [FAMILY_COMM_US * US] * FAMILY_STEPS
    assert [s.exposed_comm_ns for s in again.ranks[0].steps] == [FAMILY_EXPOSED_US * US] * FAMILY_STEPS
    assert not _hidden(again)


def test_scopes_without_a_comm_kernel_are_named_with_what_ran(tmp_path):
    rep = _report(tmp_path, family_doc(FAMILIES["group-end"]))
    ev = _hidden(rep)[0].evidence
    # 3 steps, each with one c10d::allreduce_ > record_param_comms > nccl:all_reduce nest: 3 outermost scopes.
    assert (ev["scopes"], ev["scopes_without_comm"]) == (3, 3)
    assert ev["scope_names"] == [{"name": "c10d::allreduce_", "count": 3}]
    assert ev["look_alike"] == [{"name": FAMILIES["group-end"].kernel, "kind": "compute", "count": 3,
                                 "time_ns": 3 * FAMILY_COMM_US * US}]
    assert ev["launched"] == []       # the scopes launched nothing themselves
    d = _hidden(rep)[0]
    assert d.detail == ("3 of 3 collective scopes (c10d::allreduce_ ×3) have no communication kernel or copy; "
                        "kernels named like communication: custom_ring_allreduce_kernel (compute, 3×, 0.900 ms)")


def test_a_single_rank_run_has_no_hidden_communication(tmp_path):
    # world size 1: a collective moves nothing between GPUs (corpus hta/ns_resolution_trace is such a run).
    assert not _hidden(_report(tmp_path, family_doc(FAMILIES["group-end"], world=1)))


def test_a_gloo_run_has_no_hidden_communication(tmp_path):
    # gloo's collectives run on CPU threads: no device kernel is expected for them.
    assert not _hidden(_report(tmp_path, family_doc(FAMILIES["group-end"], backend="gloo")))


def test_a_memcpy_in_a_collective_scope_linked_only_by_time_stays_a_copy(tmp_path):
    # A DtoD copy that runs during an all-gather but was launched outside its scope: timing alone does not
    # make it the collective's (any tensor copy may run then).
    doc = Doc()
    doc.step(0, 0, 150)
    for i in range(4):
        doc.launch(10 + 10 * i, "void gemm_kernel<float>(float const*, float*)", 200 + 100 * i, 100)
    doc.launch(90, "ncclDevKernel_AllGather_RING_LL(ncclDevKernelArgsStorage<4096ul>)", 450, 300, stream=13,
               op="nccl:all_gather", scope=nccl_scope("all_gather")[:2])
    doc.launch(100, "Memcpy DtoD (Device -> Device)", 460, 50, stream=21, kind="gpu_memcpy", op="aten::copy_")
    rep = _report(tmp_path, doc)
    st = rep.ranks[0].steps[0]
    # comm: the all-gather's 300 µs only; the copy's 50 µs are memcpy time.
    assert (st.comm_ns, st.memcpy_ns) == (300 * US, 50 * US)


def test_corpus_nccl_annotations_without_gpu_activity_are_no_false_alarm():
    # hta/distributed_info_unavailable: 6 nccl:all_to_all and 12 record_param_comms, no device activity at all:
    # the trace is analysed in CPU mode and says so (no-device-activity), not that communication is hidden.
    rep = api.report([str(corpus_file("hta/distributed_info_unavailable/distributed_info_not_found.json.gz"))])
    assert rep.ranks[0].mode == "cpu"
    assert not _hidden(rep)


def test_corpus_single_rank_nccl_annotations_are_no_false_alarm():
    # hta/ns_resolution_trace: 25 nccl:all_reduce and 10 nccl:broadcast annotations, world size 1 in
    # distributedInfo, 1600 DtoD copies none of which was launched inside them, no NCCL kernel: NCCL with
    # one rank has nothing to move between GPUs, so nothing is hidden and no copy becomes communication.
    rep = api.report([str(corpus_file("hta/ns_resolution_trace/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz"))])
    assert rep.ranks[0].world_size == 1
    assert rep.ranks[0].totals.comm_ns == 0
    assert not _hidden(rep)


@pytest.mark.parametrize("rel", ["hta/nccl_parser_config/nccl_data.json.gz", "hta/trace_filter/sampled_rank-0.json.gz",
                                 "hta/df_index_resolver/df_index_resolver.json.gz",
                                 "tracelens_amd/b200/eager_trace.json.gz",
                                 "hta/negative_queue_length_values_check/rank0.json.gz"])
def test_corpus_nccl_runs_have_nothing_hidden(rel):
    # NCCL kernels by name on every one: the collectives are all classified, nothing looks like hidden comm.
    rep = api.report([str(corpus_file(rel))])
    assert rep.ranks[0].totals.comm_ns > 0
    assert not _hidden(rep)


def test_ncclapi_ranges_are_intent_but_management_calls_are_not():
    from tracelens.analyzers.rank.hidden_comm import _intent
    # NCCL's API names (nccl.h): collectives and point-to-point calls show intent; setup and grouping do not.
    assert [_intent(n) for n in ("ncclAllReduce", "ncclSend", "ncclReduceScatter", "ncclGroupEnd",
                                 "ncclCommInitRank", "ncclGetUniqueId", "c10d::wait", "c10d::allreduce_")] == \
        [True, True, True, False, False, False, False, True]


def test_look_alike_test_reads_names_as_the_case_insensitive_pattern_does():
    from tracelens.analyzers.rank.hidden_comm import LOOKS_LIKE_COMM, _comm_like
    # Every generated family's kernel, names in other cases, and non-ASCII names: U+017F (long s) folds onto
    # "s" under re.IGNORECASE, which lowering the name first would miss.
    names = [f.kernel for f in FAMILIES.values()] + [
        "void AllReduceKernel<float>", "SYMM_MEM_copy", "MultiMem_ld", "gemm_128x128", "elementwise_kernel",
        "\u017fend_buffer", "\u017fymm_copy", "\u0130nt8_gemm", "conv2d_\u00e9t\u00e9", ""]
    got = [_comm_like(n) for n in names]
    assert got == [LOOKS_LIKE_COMM.search(n) is not None for n in names]
    assert got[-5:] == [True, True, False, False, False]   # by hand: "send", "symm" (long s), none, none, none


def test_what_a_scope_launched_instead_is_named(tmp_path):
    # Each step's all-reduce scope launches a 40 µs host-to-device copy and no kernel; nothing on the device is
    # communication. Host<->device copies in a scope stay copies (not copy-engine comm), so they are what ran
    # in the collective's place; no kernel to match, so no pattern to suggest.
    doc = Doc()
    for k in range(2):
        h = k * 2000
        doc.step(k, h, h + 150)
        for i in range(4):
            doc.launch(h + 10 + 10 * i, "void gemm_kernel<float>(float const*, float*)", h + 200 + 100 * i, 100)
        doc.launch(h + 100, "Memcpy HtoD (Pinned -> Device)", h + 650, 40, stream=13, kind="gpu_memcpy",
                   op="nccl:all_reduce", scope=nccl_scope()[:2])
    rep = _report(tmp_path, doc)
    d = _hidden(rep)[0]
    assert (d.evidence["scopes"], d.evidence["scopes_without_comm"]) == (2, 2)
    assert d.evidence["launched"] == [{"name": "Memcpy HtoD (Pinned -> Device)", "kind": "memcpy", "count": 2,
                                       "time_ns": 2 * 40 * US}]
    assert d.evidence["comm_pattern"] is None and d.evidence["look_alike"] == []
    assert "launched inside them: Memcpy HtoD (Pinned -> Device) (memcpy, 2×, 0.080 ms)" in d.detail
    assert rep.ranks[0].totals.comm_ns == 0 and rep.ranks[0].totals.memcpy_ns == 2 * 40 * US
