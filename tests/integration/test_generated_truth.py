"""Each rule of issue 38 on a generated trace whose cause was built in, against the generator's arithmetic:
a sync stall priced at the device idle it caused (a wait with the GPU busy is no stall), a comm backlog (GPU
and gloo), a collective's own host call that is no compute, a program that is not PyTorch, a host read that
sizes the next all-to-all, and CPU-only runs that get no GPU advice."""

from __future__ import annotations

import re

import pytest

import tracelens
from tracelens.analyzers import Thresholds

from conftest import SAMPLES
from fixtures import synth
from fixtures.findings import of, run, write
from fixtures.synth import programs

US, MS = 1_000, 1_000_000
TH = Thresholds()


def doc_report(doc, tmp_path, name="doc"):
    return run(doc.write(tmp_path / f"{name}.json"))


def doc_origin(rep) -> int:
    """The absolute ns of a Doc's time 0 (its events are µs from BASE_NS)."""
    return synth.BASE_NS


def union_overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> int:
    """Time (µs) covered by both lists of intervals, by brute force over the 1 µs grid (test-sized)."""
    cover = lambda xs: {t for s, e in xs for t in range(s, e)}
    return len(cover(a) & cover(b))


# ------------------------------------------------------------------------------------------- sync stalls

@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_a_wait_with_the_gpu_busy_is_no_stall(fmt, tmp_path):
    sc = synth.SCENARIOS["item_gpu_busy"]
    truth = synth.sync_truth(sc)
    found = of(run(write(sc, tmp_path, fmt)), "sync-stall")
    assert len(found) == sc.ranks * sc.steps
    for d in found:
        t = next(s for s in truth[d.rank] if s["step"] == d.step)
        # Generator: the host relaunches at once, so the device idles only the sync's return (2 µs) and one
        # launch latency (5 µs) after a 5.9 ms wait in which it ran the queued backward.
        assert t["idle_after_ns"] == synth.SYNC_RETURN + synth.LAUNCH_LATENCY and t["blocked_ns"] > 5 * MS
        top = d.evidence["sites"][0]
        assert top["blocked_ns"] == t["blocked_ns"] and top["idle_caused_ns"] == t["idle_caused_ns"] == 7 * US
        assert d.severity == "info" and d.evidence["impact_ns"] == 0 and top["stalls"] == 0
        assert d.title.startswith("host waits on queued device work, no stall: aten::item")


@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_a_stall_costs_the_idle_it_caused(fmt, tmp_path):
    sc = synth.SCENARIOS["item_mid_backward"]
    truth = synth.sync_truth(sc)
    for d in of(run(write(sc, tmp_path, fmt)), "sync-stall"):
        t = next(s for s in truth[d.rank] if s["step"] == d.step)
        top = d.evidence["sites"][0]
        # The host spent 400 µs before relaunching: the device idled that plus the return and a launch, all
        # of it the sync's (it held the host longer); the CPU's blocked time is not the cost.
        assert t["idle_caused_ns"] == t["idle_after_ns"] == sc.item_idle_ns + synth.SYNC_RETURN + synth.LAUNCH_LATENCY
        assert d.evidence["impact_ns"] == top["idle_caused_ns"] == t["idle_caused_ns"] < t["blocked_ns"]
        assert d.severity == "warning"


def test_a_c_program_gets_cuda_advice(tmp_path):
    doc, its = programs.c_program_doc()
    rep = doc_report(doc, tmp_path)
    (d,) = of(rep, "sync-stall")
    assert d.evidence["program"] == "cuda"
    top = d.evidence["sites"][0]
    # Arithmetic on the laid-out times: each copy-out call blocks 2018 µs while the kernel and the copy run; the
    # device then idles until the next iteration's first copy, 5030 µs of host work later, of which the wait
    # is to blame for at most the 2018 µs it held the host. Each copy-in idles the device 30 µs before the
    # kernel (under the 50 µs stall floor). The last copy-out has no device work after it (its own site).
    caused_out = [min(b.htod_copy[0] - a.dtoh_copy[1], a.dtoh_call[1] - a.dtoh_call[0]) for a, b in zip(its, its[1:])]
    caused_in = [a.kernel[0] - a.htod_copy[1] for a in its]
    assert caused_out == [2018] * 3 and caused_in == [30] * 4
    assert top["site"] == "cudaMemcpy" and top["calls"] == 7 and top["stalls"] == 3
    assert top["idle_caused_ns"] == (sum(caused_out) + sum(caused_in)) * US
    assert d.evidence["impact_ns"] == sum(caused_out) * US
    assert top["idle_after_ns"] == (sum(b.htod_copy[0] - a.dtoh_copy[1] for a, b in zip(its, its[1:]))
                                    + sum(caused_in)) * US                       # 15.21 ms, host time mostly
    window = its[-1].dtoh_copy[1] - its[0].htod_copy[0]
    assert d.evidence["duration_ns"] == window * US
    assert d.severity == ("critical" if sum(caused_out) >= TH.stall_critical_fraction * window else "warning")
    assert d.advice.startswith("a synchronous copy holds the host until the device is done: copy with "
                               "cudaMemcpyAsync from pinned host buffers (cudaHostAlloc")
    assert "pin_memory" not in d.advice and ".item()" not in d.advice


def test_a_c_program_bound_by_copies_gets_cuda_copy_advice(tmp_path):
    doc, its = programs.c_program_doc(host_us=100)
    (d,) = of(doc_report(doc, tmp_path), "memcpy-bound")
    copies = sum((a.htod_copy[1] - a.htod_copy[0]) + (a.dtoh_copy[1] - a.dtoh_copy[0]) for a in its)
    assert d.evidence["exposed_copy_ns"] == copies * US and d.evidence["program"] == "cuda"
    # All copies are from or to pageable memory: pinning comes first, in CUDA's terms.
    assert d.advice.startswith("copies from pageable memory are staged through a bounce buffer and block the "
                               "host: allocate the host buffers pinned (cudaHostAlloc")
    assert not any(w in d.advice for w in ("pin_memory", "DataLoader", "non_blocking", "torch"))


def test_a_read_that_sizes_the_next_all_to_all(tmp_path):
    found = of(doc_report(programs.splits_doc(), tmp_path), "sync-stall")
    assert len(found) == 3
    for d in found:
        top = d.evidence["sites"][0]
        chain = "aten::to → aten::_to_copy → aten::copy_ → cudaMemcpyAsync"
        assert top["site"] == f"{programs.SPLITS_SCOPE} → {chain}"
        # splits_doc: 1990 µs blocked, 310 µs of device idle after it, all of it the wait's.
        assert (top["blocked_ns"], top["idle_after_ns"], top["idle_caused_ns"]) == (1990 * US, 310 * US, 310 * US)
        assert top["feeds"] == "all_to_all" and d.severity == "warning"
        assert d.advice.startswith("the host reads this value to size the all-to-all that follows")
        assert "keep it on the GPU" not in d.advice and "pin_memory" not in d.advice


# ---------------------------------------------------------------------------------------- comm backlog

@pytest.mark.parametrize("fmt", ["kineto", "nsys"])
def test_a_comm_backlog_on_the_gpu(fmt, tmp_path):
    sc = synth.SCENARIOS["comm_backlog"]
    rep = run(write(sc, tmp_path, fmt))
    # Timing model: all-reduce i waits for all-reduce i-1 on the comm stream, so they run back to back from
    # the end of bucket 0's backward; backward ends 3 ms later (buckets 1-3). All-reduces 1-3 start after it,
    # 1 and 2 issued before bucket 3's kernel was launched; the tail is 16 - 3 = 13 ms, 9 ms of it (0's last
    # 1 ms, 1 and 2) communication issued during compute.
    (_, _, _, kernels, _) = next(synth.timeline.timeline(sc, 0))
    comm = sorted((k for k in kernels if k.comm), key=lambda k: k.start)
    backward_end = max(k.end for k in kernels if k.name.startswith("void bwd_gemm"))
    assert [b.start for b in comm[1:]] == [a.end for a in comm[:-1]]                     # queued, one by one
    tail = sum(k.end - max(k.start, backward_end) for k in comm)
    backlog = sum(k.end - max(k.start, backward_end) for k in comm[:3])
    assert (tail, backlog) == (13 * MS, 9 * MS)
    for r in rep.ranks:
        assert {s.pattern for s in r.steps} == {"backlog"} and r.pattern == "backlog"
        for s in r.steps:
            ev = s.pattern_evidence
            assert (ev.tail_ns, ev.backlog_ns, ev.tail_collectives, ev.issued_during_compute, ev.queued) == \
                (tail, backlog, 3, 2, 2)
    for d in of(rep, "overlap-pattern"):
        assert d.title.startswith("comm backlog:") and "throughput-bound" in d.advice
        assert "bucket_cap_mb" not in d.advice and "compression" in d.advice and "transport" in d.advice


def test_one_bucket_is_two_phase_not_a_backlog(tmp_path):
    # The one all-reduce is issued after the last backward kernel: nothing queued, issued after compute.
    rep = run(write(synth.SCENARIOS["one_bucket"], tmp_path))
    for s in rep.ranks[0].steps:
        ev = s.pattern_evidence
        assert s.pattern == "two-phase" and (ev.issued_during_compute, ev.queued) == (0, 0)


def test_a_gloo_backlog(tmp_path):
    # Eight 2.5 ms all-reduces, one issued after each 1 ms bucket of backward, on one gloo thread: they queue.
    st = programs.GlooStep([(1000, 2500)] * 8)
    doc, steps = programs.gloo_doc(st)
    rep = doc_report(doc, tmp_path)
    for s, truth in zip(rep.ranks[0].steps, steps):
        colls = truth.collectives
        assert all(b[0] == a[1] for a, b in zip(colls[1:], colls[2:]))             # each starts as one ends
        assert s.pattern == "backlog"
        assert s.comm_ns == sum(e - b for b, e in colls) * US
        assert s.overlap_ns == union_overlap(truth.compute, colls) * US
        ev = s.pattern_evidence
        # The compute phase ends with the last bucket's mul_out (the last compute before the optimizer, which
        # waits for every bucket); the collectives starting after it are the tail; those issued before the
        # last compute began were issued during compute, and each of them started as the one before ended.
        last = truth.compute[-2]
        tail = [i for i, (b, _) in enumerate(colls) if b >= last[1]]
        during = [i for i in tail if truth.calls[i][0] < last[0]]
        assert ev.compute_phase_end_ns - doc_origin(rep) == last[1] * US
        assert (ev.tail_collectives, ev.issued_during_compute, ev.queued) == (len(tail), len(during), len(during))
        assert len(tail) == 4 and len(during) == 3
    (d, *_) = of(rep, "overlap-pattern")
    assert d.advice.endswith("gloo's threads share the cores with the training processes: fewer processes per core")


# ------------------------------------------------------------------------------ a collective's own call

def test_the_call_that_issues_a_collective_is_no_compute(tmp_path):
    # One bucket at the end of backward: the autograd op around c10d::allreduce_ lasts 250 µs into the
    # all-reduce. Only compute hides communication: 0 % hidden, two-phase.
    doc, steps = programs.gloo_doc(programs.GlooStep([(500, 2000)]))
    rep = doc_report(doc, tmp_path)
    for s, truth in zip(rep.ranks[0].steps, steps):
        (coll,) = truth.collectives
        assert union_overlap(truth.wrappers, [coll]) == 250 and union_overlap(truth.compute, [coll]) == 0
        assert s.pattern == "two-phase" and s.overlap_ns == 0 and s.exposed_comm_ns == 2000 * US
        # Compute is the main thread's ops outside collective calls: forward, backward, the gradient's mul_out
        # inside the autograd op, the optimizer; never the op's own time around the call.
        assert s.compute_ns == sum(e - b for b, e in truth.compute) * US


# --------------------------------------------------------------------------------------- CPU-only runs

# Device levers: the GPU, CUDA calls and settings, kernels, streams to move collectives to, pinned memory.
_GPU_WORDS = re.compile(r"GPU|CUDA|cuda|kernel|pin_memory|non_blocking|own stream|compute stream|side stream")
_OWN = {"overlap-pattern", "sync-stall", "memcpy-bound", "launch-order", "bucket-size"}


@pytest.mark.parametrize("source", ["gloo_sawtooth", "gloo_one_bucket", "gloo_no_sync", "backlog", "own-call"])
def test_cpu_only_runs_get_no_gpu_advice(source, tmp_path):
    if source == "backlog":
        rep = doc_report(programs.gloo_doc(programs.GlooStep([(1000, 2500)] * 8))[0], tmp_path)
    elif source == "own-call":
        rep = doc_report(programs.gloo_doc(programs.GlooStep([(500, 2000)]))[0], tmp_path)
    else:
        rep = tracelens.analyze(tracelens.load(str(SAMPLES / source)))
    assert {r.mode for r in rep.ranks} == {"cpu"}
    mine = [d for d in rep.diagnoses if d.id in _OWN]
    assert mine
    for d in mine:
        assert not _GPU_WORDS.search(d.title + d.detail + d.advice), (d.title, d.advice)
