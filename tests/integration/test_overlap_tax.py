"""The overlap tax (docs/metrics.md, "Overlap tax") on generated traces with a known slowdown, the
median baseline on hand-made numbers, and the corpus checked by hand."""

from __future__ import annotations

import numpy as np
import pytest

from tracelens import api
from tracelens.analyzers.rank import tax
from tracelens.analyzers.thresholds import Thresholds
from fixtures.synth import US
from fixtures.synth.families import TAX_SLOW_US, TAX_STEPS, TAX_TRUTH, tax_doc
from conftest import corpus_file


def _report(tmp_path, doc, thresholds=None):
    path = doc.write(tmp_path / "rank0.json")
    return api.report([str(path)], thresholds=thresholds)


def test_a_known_slowdown_under_communication_is_the_tax(tmp_path):
    rep = _report(tmp_path, tax_doc())
    rank = rep.ranks[0]
    assert len(rank.steps) == TAX_STEPS
    for st in rank.steps:
        # Generator truth (families.TAX_TRUTH): 3 GEMMs slowed by 40 µs each, compared against the 12 runs
        # alone (3 per step x 4 steps, median 100 µs); the other-shaped GEMM and the softmax never ran alone.
        assert st.comm_ns == TAX_TRUTH["comm_ns"]
        assert st.exposed_comm_ns == TAX_TRUTH["exposed_comm_ns"]
        assert st.overlap_ns == TAX_TRUTH["overlap_ns"]
        assert st.overlap_tax_ns == TAX_TRUTH["overlap_tax_ns"]
        assert (st.overlap_tax_compared, st.overlap_tax_uncompared) == (TAX_TRUTH["compared"], TAX_TRUTH["uncompared"])
        assert st.effective_exposed_ns == TAX_TRUTH["exposed_comm_ns"] + TAX_TRUTH["overlap_tax_ns"]
    t = rank.totals
    assert t.overlap_tax_ns == TAX_STEPS * TAX_TRUTH["overlap_tax_ns"]
    assert t.effective_exposed_ns == TAX_STEPS * (TAX_TRUTH["exposed_comm_ns"] + TAX_TRUTH["overlap_tax_ns"])
    assert (t.overlap_tax_compared, t.overlap_tax_uncompared) == (TAX_STEPS * 3, TAX_STEPS * 2)
    # One rank: the run's summary is its totals (the sums over ranks, docs/metrics.md "Totals and summary").
    s = rep.summary
    assert (s.overlap_tax_ns, s.overlap_tax_compared, s.effective_exposed_ns) == \
        (t.overlap_tax_ns, TAX_STEPS * 3, t.effective_exposed_ns)
    from tracelens.renderers import figures

    head = dict(figures.headline(rep))
    assert head["overlap tax"] == f"{TAX_STEPS * TAX_TRUTH['overlap_tax_ns'] * 1e-6:.3f} ms"
    assert head["effective exposed"] == \
        f"{TAX_STEPS * (TAX_TRUTH['exposed_comm_ns'] + TAX_TRUTH['overlap_tax_ns']) * 1e-6:.3f} ms"


def test_the_tax_finding_names_the_slowed_kernel_its_baseline_and_the_collective(tmp_path):
    rep = _report(tmp_path, tax_doc())
    found = [d for d in rep.diagnoses if d.id == "overlap-tax"]
    assert len(found) == 1
    d = found[0]
    # 120 µs a step against a step of 1100 µs (launches 200 µs before the device work, which ends at
    # 900 µs): material, a warning.
    assert d.severity == "warning"
    ev = d.evidence
    assert ev["overlap_tax_ns"] == 4 * 120 * US
    assert ev["overlap_ns"] == 4 * 550 * US
    top = ev["kernels"][0]
    assert top["name"].startswith("void gemm_kernel")
    # 12 slowed runs, baseline the 100 µs runs alone, each 140 µs under the all-reduce
    assert (top["runs"], top["baseline_ns"], top["mean_ns"], top["tax_ns"]) == (12, 100 * US, 140 * US, 480 * US)
    assert top["collective"] == "all_reduce"
    assert len(ev["kernels"]) == 1          # the uncompared kernels paid no counted tax
    assert "0.48 ms" in d.detail and "0.10 ms" in d.detail and "0.14 ms" in d.detail


def test_too_few_runs_alone_leave_a_kernel_uncompared(tmp_path):
    # 12 runs alone per GEMM identity: asking for 13 compares nothing, so nothing is charged.
    rep = _report(tmp_path, tax_doc(), thresholds=Thresholds(tax_min_baseline=13))
    st = rep.ranks[0].steps[0]
    assert (st.overlap_tax_ns, st.overlap_tax_compared, st.overlap_tax_uncompared) == (0, 0, 5)
    assert st.effective_exposed_ns == st.exposed_comm_ns
    assert not [d for d in rep.diagnoses if d.id == "overlap-tax"]
    from tracelens.renderers import figures

    assert dict(figures.headline(rep))["overlap tax"] == "n/a"      # nothing compared: unknown, not 0


def test_a_kernel_no_slower_under_communication_pays_nothing(tmp_path):
    rep = _report(tmp_path, tax_doc(slow_us=0))
    assert [st.overlap_tax_ns for st in rep.ranks[0].steps] == [0] * TAX_STEPS
    assert rep.ranks[0].steps[0].overlap_tax_compared == 3
    assert not [d for d in rep.diagnoses if d.id == "overlap-tax"]


def test_a_larger_slowdown_is_charged_up_to_the_overlap(tmp_path):
    # 400 µs slower each (500 µs under the all-reduce instead of 100 µs): 3 x 400 µs a step. Each slowed
    # GEMM lies wholly under the all-reduce, so its 400 µs excess is below its 500 µs overlap: not clipped.
    rep = _report(tmp_path, tax_doc(slow_us=400))
    assert [st.overlap_tax_ns for st in rep.ranks[0].steps] == [3 * 400 * US] * TAX_STEPS
    d = next(d for d in rep.diagnoses if d.id == "overlap-tax")
    assert d.evidence["kernels"][0]["mean_ns"] == 500 * US


def test_median_baseline_by_hand():
    # Groups 0 and 1; alone durations: group 0 {5, 1, 3} -> median 3; group 1 {10, 20} -> (10 + 20) // 2 = 15;
    # group 2 has none alone -> 0 with 0 samples.
    group = np.array([0, 0, 0, 1, 1, 2, 0])
    dur = np.array([5, 1, 3, 20, 10, 7, 99])
    alone = np.array([True, True, True, True, True, False, False])
    med, count = tax._medians(group, dur, alone)
    assert med.tolist() == [3, 15, 0] and count.tolist() == [3, 2, 0]


def test_corpus_b200_tax_by_hand():
    # corpus tracelens_amd/b200: NCCL 2.27 kernels on the compute stream (stream 7), so no compute kernel
    # ever runs beside communication: nothing is overlapped, nothing compared, no tax.
    path = corpus_file("tracelens_amd/b200/eager_trace.json.gz")
    rep = api.report([str(path)])
    t = rep.ranks[0].totals
    assert t.overlap_ns == 0
    assert (t.overlap_tax_ns, t.overlap_tax_compared, t.overlap_tax_uncompared) == (0, 0, 0)
    assert t.effective_exposed_ns == t.exposed_comm_ns


def _oracle(trace, sets, windows, min_baseline):
    """The tax by its definition, kernel by kernel in plain Python (no interval algebra, no vectorising)."""
    import statistics
    ops, host = trace.device_ops.to_pandas(), trace.host_ops
    comm = [(s, e) for s, e in zip(*sets.comm)]
    shapes = host["shapes"].tolist()
    kernels = []
    for name, dev, kind, s, e, cfg, op in zip(ops["name"].astype(str), ops["device"], ops["kind"].astype(str),
                                              ops["start_ns"], ops["end_ns"], ops["config"], ops["op_idx"]):
        if dev != sets.device or kind != "compute":
            continue
        under = sum(max(0, min(e, ce) - max(s, cs)) for cs, ce in comm)
        kernels.append(((name, cfg, shapes[op] if op >= 0 else -1), s, e - s, under))
    alone: dict = {}
    for key, _, d, under in kernels:
        if under == 0:
            alone.setdefault(key, []).append(d)
    total = compared = 0
    for key, s, d, under in kernels:
        inside = any(lo <= s < hi for lo, hi in zip(windows.start, windows.end))
        if under == 0 or not inside:
            continue
        runs = sorted(alone.get(key, []))
        if len(runs) < min_baseline:
            continue
        base = (runs[(len(runs) - 1) // 2] + runs[len(runs) // 2]) // 2
        assert base == int(statistics.median(runs)) or len(runs) % 2 == 0
        total += min(max(d - base, 0), under)
        compared += 1
    return total, compared


@pytest.mark.parametrize("rel", ["hta/nccl_parser_config/nccl_data.json.gz", "hta/trace_filter/sampled_rank-0.json.gz"])
def test_corpus_tax_equals_the_definition_kernel_by_kernel(rel):
    # The corpus traces where compute runs beside NCCL kernels: the vectorised tax against the definition
    # evaluated kernel by kernel (nccl_data: 207 kernels compared, 1.02 ms of tax, under the materiality floor).
    from tracelens.analyzers.rank import overlap
    trace = api.load([str(corpus_file(rel))])[0]
    notes = []
    sets = overlap.interval_sets(trace, lambda *a: notes.append(a))
    windows = overlap.step_windows(trace, sets, lambda *a: notes.append(a))
    got = tax.measure(trace, sets, windows, 3)
    want_total, want_compared = _oracle(trace, sets, windows, 3)
    assert want_compared > 0
    assert (int(got.tax_ns.sum()), int(got.compared.sum())) == (want_total, want_compared)


def test_launch_configuration_ids_follow_grid_and_block_on_nsys_input():
    # corpus nsys-ai/mfu_2gpu_before: the kernels' grid and block read straight from the export with SQL; two
    # kernels share a config id exactly when their six numbers are equal (compared on each process's rows).
    import sqlite3
    path = corpus_file("nsys/nsys-ai/mfu_2gpu_before.sqlite")
    trace = api.load([str(path)])[0]
    ops = trace.device_ops.to_pandas()
    ops = ops[ops["kind"].astype(str).isin(["compute", "comm"])]
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    rows = con.execute("SELECT start, gridX, gridY, gridZ, blockX, blockY, blockZ FROM CUPTI_ACTIVITY_KIND_KERNEL "
                       "WHERE deviceId = ?", (int(ops["device"].iloc[0]),)).fetchall()
    con.close()
    dims = {}
    for start, *six in rows:
        dims.setdefault(start, set()).add(tuple(six))
    base = trace.meta.base_ns
    pairs = {}
    for start, cfg in zip(ops["start_ns"].tolist(), ops["config"].tolist()):
        got = dims.get(start - base)
        if got is not None and len(got) == 1:
            pairs.setdefault(cfg, set()).add(next(iter(got)))
    assert len(pairs) > 1 and all(len(v) == 1 for v in pairs.values())      # one configuration per id ...
    assert len({next(iter(v)) for v in pairs.values()}) == len(pairs)       # ... and one id per configuration
    assert (ops["config"] >= 0).all()
