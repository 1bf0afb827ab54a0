"""The sentences of every finding, straight from analyzers/wording/ (one module per family of findings).

Each test gives the wording package hand-made evidence in which every value differs, and checks every
number of the title, detail and advice against the evidence value it must come from: a sentence that printed
the wrong value, or a number from anywhere else, fails (each sentence must match its template in full).
The analyzers' entries on real and generated traces are checked against their evidence in
test_pattern_verdicts.py, test_findings_noise.py and test_diagnoses.py.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tracelens.analyzers import wording
from tracelens.analyzers.wording import Finding
from fixtures.findings import NUM, check_exposed, check_stall_detail, fields, ms, pct
from fixtures.findings import exposed_template as _exposed

MS = 1_000_000
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def word(id_: str, verdict: str | None, evidence: dict, step: int | None = 4):
    """The Diagnosis the wording package makes of a finding (severity and rank never change a sentence)."""
    return wording.diagnosis(Finding(id=id_, severity="warning", rank=2, step=step, verdict=verdict,
                                     evidence=evidence))


def pattern_ev(**changes) -> dict:
    """Hand-made overlap-pattern evidence, every value distinct (the keys pattern.diagnose writes)."""
    ev = {"pattern": "two-phase", "mode": "gpu", "overlap_pct": 61.4, "comm_ns": 4_321_000,
          "exposed_comm_ns": 1_668_000, "exposed_comm_fraction": 0.0873, "duration_ns": 19_100_000,
          "impact_ns": 1_668_000, "material": True, "comm_kernels": 12, "bursts": 5, "started_during_compute": 7,
          "compute_start_ns": 1_000, "compute_phase_end_ns": 9_000, "first_comm_ns": 2_000,
          "first_comm_offset": 0.125, "tail_ns": 1_234_000, "tail_fraction": 0.2856, "op": "all_gather",
          "comm_on_compute_stream": 0.734, "program": "pytorch", "ops": {"all_gather": 12}, "tail_collectives": 6,
          "issued_during_compute": 4, "queued": 3, "backlog_ns": 987_000}
    return {**ev, **changes}


def test_the_wording_passes_the_finding_through():
    ev = pattern_ev(pattern="partial")
    d = word("overlap-pattern", "partial", ev, step=9)
    assert (d.id, d.severity, d.rank, d.step, d.evidence) == ("overlap-pattern", "warning", 2, 9, ev)
    # One sentence function per id and verdict, each tested below.
    assert set(wording.WORDING) == {
        *(("overlap-pattern", v) for v in ("nothing-to-overlap", "sawtooth", "two-phase", "backlog",
                                           "serialized-on-compute-stream", "serialized", "partial")),
        *(("sync-stall", v) for v in ("stall", "end-of-step", "host-wait", "brief")), ("launch-order", None),
        ("straggler", "step-time"), ("straggler", "compute-time"),
        *(("straggler", v) for v in ("compute", "host-gap", "sync-stall", "late-launch", "unknown")),
        ("clock-offset", "corrected"), ("clock-offset", "uncertain"), ("no-gpu-activity", None),
        ("memcpy-bound", None),
        ("overlap-tax", None), ("hidden-comm", "no-comm-kernel"), ("hidden-comm", "look-alike"),
        *(("nccl-transport", v) for v in ("tcp_silent_fallback", "tcp_no_rdma", "tcp_deliberate", "tcp_suspected",
                                          "rdma_gdr", "rdma_host_staged", "rdma_init_only", "intra_node_only",
                                          "inconclusive", "unknown")),
        ("bucket-size", None), ("config-mismatch", None), ("slow-link", None),
        *(("outlier", v) for v in ("wait", "transfer", "early", "unknown")),
        ("drift", "exposed-comm"), ("drift", "step-time"), ("drift", "collective-time"),
        *(("parallelism", v) for v in ("dp", "fsdp", "tp", "pp", "ep", "emb", "cp", "unknown"))}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    return names | {"." * n.level + (n.module or "") for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}


def test_the_wording_module_only_formats():
    # It imports the report types and the standard library, never numpy, pandas, the thresholds or the
    # interval algebra: whatever a sentence states has to come from the evidence it is given. A family's
    # module imports the shared base only, so no family's sentences lean on another's.
    package = Path(wording.__file__).parent
    # comparison words `tracelens diff`'s answer: formatting only, as the families, but no finding's.
    families = sorted(p for p in package.glob("*.py") if p.stem not in ("__init__", "base", "comparison"))
    assert len(families) == 10
    assert _imports(package / "comparison.py") <= {"__future__", ".base"}
    # ...units: how a size is printed, shared with the renderers (formatting, no measurement)
    assert _imports(package / "base.py") <= {"__future__", "dataclasses", "typing", "...units"}
    for path in families:
        assert _imports(path) <= {"__future__", "re", "typing", ".base"}, path.name
    assert _imports(package / "__init__.py") <= {"__future__", "typing", "...contract", ".", ".base",
                                                 ".peers"}
    # Every family's sentences reach the report: each module's table is part of WORDING.
    for path in families:
        table = getattr(getattr(wording, path.stem), "SENTENCES")
        assert table and all(wording.WORDING[k] is v for k, v in table.items()), path.name


def test_sawtooth_wording():
    ev = pattern_ev(pattern="sawtooth")
    d = word("overlap-pattern", "sawtooth", ev)
    f = fields(r"(?P<k>\d+) of (?P<n>\d+) all-gathers start during the compute phase; (?P<h>\d+\.\d) % of their "
               r"time is hidden", d.detail)
    assert (int(f["k"]), int(f["n"]), f["h"]) == (ev["started_during_compute"], ev["comm_kernels"],
                                                  pct(ev["overlap_pct"]))
    check_exposed(ev, *re.fullmatch(_exposed(ev) + r": earlier launches hide more", d.advice).groups())
    # Buckets only for DDP's all-reduces in a PyTorch program.
    ddp = pattern_ev(pattern="sawtooth", op="all_reduce", ops={"all_reduce": 12})
    assert word("overlap-pattern", "sawtooth", ddp).advice.endswith(
        ": a smaller last bucket or earlier launches hide more")
    # Nothing exposed: nothing to advise. One collective that started "starts"; a CPU step without a known
    # collective counts collectives in the main thread's compute phase.
    assert word("overlap-pattern", "sawtooth", pattern_ev(exposed_comm_ns=0)).advice == ""
    cpu = pattern_ev(mode="cpu", op=None, ops=None, started_during_compute=1, comm_kernels=3)
    assert word("overlap-pattern", "sawtooth", cpu).detail == \
        "1 of 3 collectives starts during the main thread's compute phase; 61.4 % of their time is hidden"


def test_two_phase_wording():
    ev = pattern_ev()          # 7 of 12 started during the compute phase: the tail share, no claim of order
    d = word("overlap-pattern", "two-phase", ev)
    assert d.title == "two-phase: communication waits for the end of compute"
    m = re.fullmatch(rf"(\d+\.\d) % of communication \(({NUM}) ms of ({NUM}) ms\) runs after the compute phase, "
                     rf"(\d+) of (\d+) all-gathers start during it; {_exposed(ev)}, (\d+\.\d) % hidden", d.detail)
    assert m[1] == pct(100 * ev["tail_fraction"]) and m[2] == ms(ev["tail_ns"]) and m[3] == ms(ev["comm_ns"])
    assert (int(m[4]), int(m[5])) == (ev["started_during_compute"], ev["comm_kernels"])
    check_exposed(ev, m[6], m[7])
    assert m[8] == pct(ev["overlap_pct"])
    # All-gathers are no DDP buckets: no bucket_cap_mb, the lever for any collective instead.
    assert "bucket" not in d.advice and d.advice.startswith("start each collective as soon as its input is ready")
    ddp = word("overlap-pattern", "two-phase", pattern_ev(op="all_reduce", ops={"all_reduce": 12}))
    assert "bucket_cap_mb" in ddp.advice and "no_sync" in ddp.advice and "a sync before the optimizer" in ddp.advice
    # A C program's all-reduces, or all-to-alls beside them, get no bucket advice either.
    for other in (pattern_ev(op="all_reduce", ops={"all_reduce": 12}, program="cuda"),
                  pattern_ev(op="all_to_all", ops={"all_to_all": 7, "all_reduce": 5})):
        assert "bucket" not in word("overlap-pattern", "two-phase", other).advice
    # None started before the phase end: the order is proven, so it says so.
    ev = pattern_ev(started_during_compute=0)
    m = re.fullmatch(rf"(\d+) all-gathers all start after the compute phase; {_exposed(ev)}, (\d+\.\d) % hidden",
                     word("overlap-pattern", "two-phase", ev).detail)
    assert int(m[1]) == ev["comm_kernels"] and m[4] == pct(ev["overlap_pct"])
    check_exposed(ev, m[2], m[3])
    cpu = pattern_ev(started_during_compute=0, comm_kernels=1, mode="cpu", op="all_reduce", ops={"all_reduce": 1})
    d = word("overlap-pattern", "two-phase", cpu)
    assert d.detail.startswith("1 all-reduce starts after the main thread's compute phase; ")
    assert "bucket_cap_mb" in d.advice and "sync" not in d.advice.replace("no_sync", "")   # no device to sync


def test_counts_are_per_operation():
    # 7 all-to-alls and 5 all-reduces are 12 collectives, never "12 all-to-alls".
    ev = pattern_ev(op="all_to_all", ops={"all_to_all": 7, "all_reduce": 5})
    m = re.fullmatch(rf"(\d+) of (\d+) comm kernels \((\d+) all-to-alls, (\d+) all-reduces\) start during it; .*",
                     word("overlap-pattern", "two-phase", ev).detail.split(", ", 1)[1])
    assert [int(x) for x in m.groups()] == [ev["started_during_compute"], ev["comm_kernels"], 7, 5]
    # Activities without a collective record are counted apart.
    ev = pattern_ev(op="all_to_all", ops={"all_to_all": 10}, comm_kernels=12, started_during_compute=0)
    assert word("overlap-pattern", "two-phase", ev).detail.startswith(
        "12 comm kernels (10 all-to-alls, 2 without a collective record) all start after the compute phase")


def test_backlog_wording():
    ev = pattern_ev(pattern="backlog", op="all_reduce", ops={"all_reduce": 12})
    d = word("overlap-pattern", "backlog", ev)
    assert d.title == "comm backlog: collectives issued during compute start late, queued behind earlier ones"
    m = re.fullmatch(rf"(\d+) of the (\d+) collectives that start after the compute phase were issued during it, "
                     rf"(\d+) of them queued behind earlier communication; ({NUM}) ms of the ({NUM}) ms after it is "
                     rf"communication issued during it; {_exposed(ev)}, (\d+\.\d) % hidden", d.detail)
    assert [int(x) for x in m.groups()[:3]] == [ev["issued_during_compute"], ev["tail_collectives"], ev["queued"]]
    assert (m[4], m[5]) == (ms(ev["backlog_ns"]), ms(ev["tail_ns"]))
    check_exposed(ev, m[6], m[7])
    assert m[8] == pct(ev["overlap_pct"])
    # Its lever is bytes and bandwidth, never smaller buckets or earlier launches.
    assert d.advice.startswith("the communication is throughput-bound") and "compression" in d.advice
    assert "bf16" in d.advice and "transport" in d.advice and "bucket_cap_mb" not in d.advice
    a2a = word("overlap-pattern", "backlog", pattern_ev(ops={"all_to_all": 12}, op="all_to_all")).advice
    assert "DDP" not in a2a and "fewer or larger messages" in a2a
    assert "processes per core" in word("overlap-pattern", "backlog", pattern_ev(mode="cpu")).advice


def test_serialized_wording():
    ev = pattern_ev(pattern="serialized")
    d = word("overlap-pattern", "serialized-on-compute-stream", ev)
    assert d.title == "serialized: communication on the compute stream, taking turns with compute"
    m = re.fullmatch(rf"(\d+\.\d) % of communication time runs on a stream that also runs compute; (\d+) all-gathers "
                     rf"in (\d+) bursts between compute, (\d+\.\d) % hidden; {_exposed(ev)}", d.detail)
    assert m[1] == pct(100 * ev["comm_on_compute_stream"]) and int(m[2]) == ev["comm_kernels"]
    assert int(m[3]) == ev["bursts"] and m[4] == pct(ev["overlap_pct"])
    check_exposed(ev, m[5], m[6])
    assert "own stream" in d.advice
    d = word("overlap-pattern", "serialized", ev)
    assert d.title == "serialized: communication between compute, never alongside it"
    m = re.fullmatch(rf"(\d+) all-gathers run in (\d+) bursts between compute but only (\d+\.\d) % of their time is "
                     rf"hidden; {_exposed(ev)}", d.detail)
    assert (int(m[1]), int(m[2]), m[3]) == (ev["comm_kernels"], ev["bursts"], pct(ev["overlap_pct"]))
    check_exposed(ev, m[4], m[5])
    assert "CUDA_DEVICE_MAX_CONNECTIONS" in d.advice
    assert "async_op=True" in word("overlap-pattern", "serialized", pattern_ev(mode="cpu")).advice
    c_program = word("overlap-pattern", "serialized-on-compute-stream", pattern_ev(program="cuda")).advice
    assert "async_op" not in c_program and "a stream of their own" in c_program


def test_partial_wording():
    ev = pattern_ev(pattern="partial")
    d = word("overlap-pattern", "partial", ev)
    assert d.title == "partial overlap"
    m = re.fullmatch(rf"(\d+\.\d) % of communication is hidden and (\d+\.\d) % runs after the compute phase; {_exposed(ev)}",
                     d.detail)
    assert m[1] == pct(ev["overlap_pct"]) and m[2] == pct(100 * ev["tail_fraction"])
    check_exposed(ev, m[3], m[4])
    assert d.advice == "launch collectives before the compute they can hide behind"      # all-gathers: no buckets
    ddp = word("overlap-pattern", "partial", pattern_ev(op="all_reduce", ops={"all_reduce": 12}))
    assert ddp.advice.startswith("smaller or earlier buckets; ")
    # Nothing hidden is 0 %, not "none" (a ratio is only null without communication, and then no entry).
    assert word("overlap-pattern", "partial", pattern_ev(overlap_pct=0.0)).detail.startswith("0.0 % of communication")


def test_nothing_to_overlap_wording():
    ev = pattern_ev(pattern=None, overlap_pct=0.0, exposed_comm_ns=4_321_000)
    d = word("overlap-pattern", "nothing-to-overlap", ev)
    assert d.title == "nothing to overlap: no compute in this step"
    m = re.fullmatch(rf"({NUM}) ms of communication \((\d+) all-gathers\) and no compute on the device", d.detail)
    assert m[1] == ms(ev["comm_ns"]) and int(m[2]) == ev["comm_kernels"]
    assert d.advice.startswith("a communication-only step")
    d = word("overlap-pattern", "nothing-to-overlap", {**ev, "mode": "cpu", "op": None, "ops": None})
    assert d.detail == "4.321 ms of communication (12 collectives) and no compute on the main thread"  # 4_321_000 ns
    assert "CPU ops are missing" in d.advice


ITEM = "aten::item → aten::_local_scalar_dense → cudaStreamSynchronize"


def sync_site(**changes) -> dict:
    """A hand-made call site of the sync-stall evidence (the keys syncs._sites writes), values distinct."""
    site = {"site": ITEM, "call": "cudaStreamSynchronize", "python_frame": None, "calls": 3, "stalls": 2,
            "blocked_ns": 1_234_000, "max_blocked_ns": 800_000, "idle_after_ns": 567_000, "idle_caused_ns": 456_000,
            "comm_in_flight_ns": 2_345_000, "end_of_step": False, "first_ns": 10, "stall_ns": 456_000, "feeds": None}
    return {**site, **changes}


def sync_ev(*sites, program="pytorch") -> dict:
    return {"calls": 8, "stalls": 3, "blocked_ns": 3_456_000, "idle_after_ns": 789_000, "idle_caused_ns": 678_000,
            "mid_step_sites": 1, "duration_ns": 50_000_000, "impact_ns": 456_000, "material": True,
            "program": program, "sites": list(sites)}


def test_sync_stall_wording():
    ev = sync_ev(sync_site(), sync_site(site="cudaMemcpyAsync", calls=5, stalls=1))
    top = ev["sites"][0]
    d = word("sync-stall", "stall", ev)
    assert d.title == f"sync stall: {ITEM}"
    check_stall_detail(d, ev, top)
    assert d.advice.startswith("a tensor is read on the CPU mid-step")
    # One site of a trace without steps, nothing in flight, its Python line known.
    ev = sync_ev(sync_site(comm_in_flight_ns=0, python_frame="train.py(41): step"))
    d = word("sync-stall", "stall", ev, step=None)
    assert d.title == f"sync stall: {ITEM} in train.py(41): step"
    m = re.fullmatch(rf"(\d+)×: the device idled ({NUM}) ms because of it; CPU blocked ({NUM}) ms, device idle "
                     rf"({NUM}) ms after it", d.detail)
    top = ev["sites"][0]
    assert (int(m[1]), m[2], m[3], m[4]) == (top["calls"], ms(top["idle_caused_ns"]), ms(top["blocked_ns"]),
                                             ms(top["idle_after_ns"]))
    # Without a mid-step stall the entry names what it saw and advises nothing.
    for verdict, title in (("end-of-step", "sync at the end of the step: "), ("brief", "brief syncs, no stall: ")):
        d = word("sync-stall", verdict, ev)
        assert d.title == f"{title}{ITEM} in train.py(41): step" and d.advice == ""
    # A long wait the device worked through: named a wait, and no lever is offered for it.
    d = word("sync-stall", "host-wait", ev)
    assert d.title == f"host waits on queued device work, no stall: {ITEM} in train.py(41): step"
    assert d.advice == "the device kept working while the CPU waited: removing the wait frees the CPU, not the device"


@pytest.mark.parametrize("site, call, advice", [
    ("aten::to → aten::_to_copy → aten::copy_ → cudaStreamSynchronize", "cudaStreamSynchronize",
     "a tensor is read"),
    ("aten::is_nonzero → aten::item → cudaStreamSynchronize", "cudaStreamSynchronize", "a tensor is read"),
    ("cudaDeviceSynchronize", "cudaDeviceSynchronize", "torch.cuda.synchronize() in the loop"),
    ("", "Context Sync", "torch.cuda.synchronize() in the loop"),
    ("DistributedDataParallel.forward → cudaEventSynchronize", "cudaEventSynchronize", "DDP's runtime logging"),
    ("cudaEventSynchronize", "cudaEventSynchronize", "an event is waited on"),
    ("", "Event Sync", "an event is waited on"),
    ("aten::to → aten::copy_ → cudaMemcpyAsync", "cudaMemcpyAsync", "a copy blocks the CPU"),
    ("cudaMemset", "cudaMemset", "a copy blocks the CPU"),
    ("main → cuStreamSynchronize", "cuStreamSynchronize", "find the call site"),
])
def test_sync_stall_advice_follows_the_call(site, call, advice):
    d = word("sync-stall", "stall", sync_ev(sync_site(site=site, call=call)))
    assert d.advice.startswith(advice)


@pytest.mark.parametrize("call, advice", [
    ("cudaMemcpy", "a synchronous copy holds the host until the device is done: copy with cudaMemcpyAsync"),
    ("cudaDeviceSynchronize", "cudaDeviceSynchronize in the loop: wait only on the stream or event"),
    ("cudaEventSynchronize", "an event is waited on from the CPU (timers): query it with cudaEventQuery"),
    ("cudaStreamSynchronize", "the host waits for the device mid-loop"),
])
def test_sync_stall_advice_for_a_cuda_program(call, advice):
    # A C/MPI CUDA program (no aten ops): CUDA runtime levers, never pin_memory=True or .item().
    d = word("sync-stall", "stall", sync_ev(sync_site(site=call, call=call), program="cuda"))
    assert d.advice.startswith(advice) and "pin_memory" not in d.advice and ".item()" not in d.advice


def test_sync_stall_advice_when_the_host_needs_the_value():
    # The value sizes the all-to-all that follows (its split sizes): no "keep it on the GPU".
    site = sync_site(site="## sparse_data_dist ## → aten::to → aten::copy_ → cudaMemcpyAsync",
                     call="cudaMemcpyAsync", feeds="all_to_all")
    d = word("sync-stall", "stall", sync_ev(site))
    assert d.advice.startswith("the host reads this value to size the all-to-all that follows")
    assert "pin_memory" not in d.advice and "keep it on the GPU" not in d.advice and "reuse sizes" in d.advice


LONG = "void " + "k" * 70 + "(float*)"      # a kernel name over 60 characters


def launch_ev(connections=None) -> dict:
    """Hand-made launch-order evidence (the keys launch_order._finding writes): two queued collectives and one
    launched late, the worst of each not the first of the list, every delay distinct."""
    def coll(kind, name, delay, kernel):
        return {"kind": kind, "name": name, "stream": 13, "start_ns": 0, "launch_ns": 0, "delay_ns": delay,
                "exposed_ns": 5 * MS, "kernels": [kernel, "void other_kernel(float*)"]}

    return {"cuda_device_max_connections": connections, "hideable_ns": 3_801_000, "duration_ns": 40 * MS,
            "impact_ns": 3_801_000, "material": True,
            "queued": {"count": 2, "delay_ns": 3_100_000, "worst": 1},
            "late": {"count": 1, "delay_ns": 700_000, "worst": 2},
            "collectives": [coll("queued", "void nccl_a(int)", 1_000_000, "void gemm_a(float*)"),
                            coll("queued", f"void {NCCL}", 2_100_000, LONG),
                            coll("late", "nccl_c", 700_000, "void gemm_c<float>(float const*)")]}


def test_launch_order_wording():
    ev = launch_ev()
    d = word("launch-order", None, ev)
    assert d.title == "launch order: exposed communication queued behind later-launched compute and launched too late"
    q, late = ev["collectives"][ev["queued"]["worst"]], ev["collectives"][ev["late"]["worst"]]
    short = "k" * 59 + "…"                  # without "void " and its parameters, cut at 60 characters
    m = re.fullmatch(
        rf"(\d+) comm kernel\(s\) waited ({NUM}) ms behind compute launched after them \(worst: "
        rf"ncclDevKernel_AllReduce_Sum_f32_RING_LL behind {short}, ({NUM}) ms\); (\d+) comm kernel\(s\) were "
        rf"launched ({NUM}) ms after compute they could have overlapped had started \(worst: nccl_c launched "
        rf"({NUM}) ms into gemm_c<float>\); up to ({NUM}) ms could be hidden "
        rf"\(CUDA_DEVICE_MAX_CONNECTIONS was not recorded\)", d.detail)
    assert (int(m[1]), m[2], m[3]) == (ev["queued"]["count"], ms(ev["queued"]["delay_ns"]), ms(q["delay_ns"]))
    assert (int(m[4]), m[5], m[6]) == (ev["late"]["count"], ms(ev["late"]["delay_ns"]), ms(late["delay_ns"]))
    assert m[7] == ms(ev["hideable_ns"])
    assert d.advice == ("set CUDA_DEVICE_MAX_CONNECTIONS=1 so kernels start in launch order; launch the collective "
                        "before gemm_c<float> (issue it as soon as its input is ready)")
    # The recorded setting is named; with one connection kernels already start in launch order.
    d = word("launch-order", None, {**launch_ev("1"), "late": None})
    assert d.title == "launch order: exposed communication queued behind later-launched compute"
    assert d.detail.endswith("(CUDA_DEVICE_MAX_CONNECTIONS=1 in this run)") and "launched too late" not in d.detail
    assert d.advice == "kernels already start in launch order here: check what the collective waits on"
    d = word("launch-order", None, {**launch_ev("8"), "queued": None})
    assert d.title == "launch order: exposed communication launched too late"
    assert d.detail.startswith("1 comm kernel(s) were launched")
    assert "CUDA_DEVICE_MAX_CONNECTIONS=8 in this run" in d.detail


# Kernel names of the HTA corpus trace hta/trace_filter (sampled_rank-1.json.gz, the kernels its launch-order
# findings name) and how a person shortens them: without ``void``, parameters and anonymous namespaces; template
# arguments and namespaces only while the name is over 60 characters; the function's own name kept.
KERNEL_NAMES = [
    ("void fbgemm_gpu::(anonymous namespace)::_compute_FP8_quantize_cuda_kernel<float>(float const*, float const*, "
     "int, int, unsigned char*, bool)", "fbgemm_gpu::_compute_FP8_quantize_cuda_kernel<float>"),
    ("void fbgemm_gpu::(anonymous namespace)::_FP8rowwise_to_float_cuda_kernel<float>(unsigned char const*, int, "
     "int, float*, bool)", "fbgemm_gpu::_FP8rowwise_to_float_cuda_kernel<float>"),
    ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, at::detail::Array<char*, 1> "
     ">(int, at::native::FillFunctor<float>, at::detail::Array<char*, 1>)", "at::native::vectorized_elementwise_kernel"),
    ("void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl<at::native::BUnaryFunctor<float, float, "
     "float, at::native::binary_internal::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BUnaryFunctor<"
     "float, float, float, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1}>(int, "
     "at::native::gpu_kernel_impl<at::native::BUnaryFunctor<float, float, float, at::native::binary_internal::"
     "MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BUnaryFunctor<float, float, float, at::native::"
     "binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})", "at::native::elementwise_kernel"),
    ("ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t(ncclDevComm*, unsigned long, ncclWork*)",
     "ncclKernel_SendRecv_RING_SIMPLE_Sum_int8_t"),
    # CUTLASS's generic Kernel is named by what it runs, its template argument.
    ("void cutlass::Kernel<cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1>(cutlass_80_tensorop_s1688gemm_"
     "256x128_32x3_tn_align1::Params)", "cutlass_80_tensorop_s1688gemm_256x128_32x3_tn_align1"),
    # Not a C++ signature (a space before its parenthesis): as it is.
    ("Memset (Device)", "Memset (Device)"),
]


@pytest.mark.parametrize("name, want", KERNEL_NAMES)
def test_kernel_names_are_shortened_as_a_person_would(name, want):
    assert wording.base.kernel_name(name) == want


def test_a_kernel_name_keeps_its_own_name_over_its_namespaces():
    # A name whose namespaces alone fill the width: they go, outermost first, before its own name is cut.
    name = "void " + "::".join(["outer_namespace_" + "x" * 20, "inner_namespace_" + "y" * 20, "own_kernel"]) + "(int)"
    assert wording.base.kernel_name(name) == "inner_namespace_" + "y" * 20 + "::own_kernel"
    assert wording.base.kernel_name(name, width=12) == "own_kernel"
    assert wording.base.kernel_name(name, width=5) == "own_…"


def test_a_sentence_names_a_kernel_by_its_own_name():
    # The launch-order finding of rank 1, step 552 of hta/trace_filter: its SendRecv kernel queued behind the
    # fbgemm kernel (KERNEL_NAMES) launched after it; a cut at the first parenthesis left "fbgemm_gpu::".
    ev = launch_ev()
    ev["collectives"][1]["kernels"][0] = KERNEL_NAMES[1][0]
    d = word("launch-order", None, ev)
    assert f"behind {KERNEL_NAMES[1][1]}, " in d.detail and "fbgemm_gpu::," not in d.detail


# --------------------------------------------------------------------- straggler, no GPU activity

def test_no_gpu_activity_wording():
    # One call, no GPU listed: the singular, and no "lists" clause.
    d = word("no-gpu-activity", None, {"nccl_calls": 1, "gpus_listed": 0, "backend": "nccl"}, step=None)
    assert d.title == "no GPU activity recorded: the profiler recorded the CPU only"
    assert d.detail == ("the trace has 1 NCCL call on the CPU, but no kernel, copy or sync on any GPU: "
                        "communication and its overlap cannot be measured")
    assert "ProfilerActivity.CUDA" in d.advice
    # Each count takes its own plural.
    for ev, template in (({"nccl_calls": 6, "gpus_listed": 1}, r"calls on the CPU, and lists (\d+) GPU,"),
                         ({"nccl_calls": 1, "gpus_listed": 8}, r"call on the CPU, and lists (\d+) GPUs,")):
        m = re.fullmatch(rf"the trace has (\d+) NCCL {template} but no kernel, copy or sync on any GPU: "
                         r"communication and its overlap cannot be measured",
                         word("no-gpu-activity", None, ev, step=None).detail)
        assert (int(m[1]), int(m[2])) == (ev["nccl_calls"], ev["gpus_listed"])


def test_straggler_wording():
    # Hand-made evidence, every value distinct: (23.7 - 20.03) / 20.03 = 18.3 % over in step time,
    # (15.48 - 14.91) / 14.91 = 3.8 % in compute. The titled quantity leads the detail.
    ev = {"step_ns": 23_700_000, "ranks_step_ns": 20_030_000, "compute_ns": 15_480_000,
          "ranks_compute_ns": 14_910_000, "step_excess": 0.1832, "compute_excess": 0.0382, "steps": 5, "ranks": 8,
          "impact_ns": 3_670_000, "material": True, "cpu": False}
    for verdict, what, excess in (("step-time", "step", ev["step_excess"]),
                                  ("compute-time", "compute", ev["compute_excess"])):
        d = word("straggler", verdict, ev, step=None)
        m = re.fullmatch(r"straggler: (step|compute) time (\d+\.\d) % above the median of (\d+) ranks", d.title)
        assert (m[1], m[2], int(m[3])) == (what, pct(100 * excess), ev["ranks"])
        m = re.fullmatch(rf"median ({what}) ({NUM}) ms against ({NUM}) ms, median (step|compute) ({NUM}) ms against "
                         rf"({NUM}) ms \(over its (\d+) complete steps and the (\d+) ranks; no collective was matched "
                         r"across ranks, so who waits for whom is not known\)", d.detail)
        other = "compute" if what == "step" else "step"
        assert m.groups() == (what, ms(ev[f"{what}_ns"]), ms(ev[f"ranks_{what}_ns"]), other, ms(ev[f"{other}_ns"]),
                              ms(ev[f"ranks_{other}_ns"]), str(ev["steps"]), str(ev["ranks"]))
        assert d.advice.startswith("if the other ranks wait for this one: ") and "GPU clocks" in d.advice
    # A CPU-backend run gets no GPU advice.
    assert "GPU" not in word("straggler", "step-time", {**ev, "cpu": True}, step=None).advice


def copy_ev(**changes) -> dict:
    """Hand-made memcpy-bound evidence, every value distinct (the keys copies.analyze writes)."""
    ev = {"exposed_copy_ns": 7_345_000, "copy_fraction": 0.6712, "copy_ns": 7_901_000, "memcpy_ns": 7_512_000,
          "memset_ns": 389_000, "duration_ns": 10_943_000, "compute_ns": 2_114_000, "comm_ns": 531_000,
          "by_direction": {"HtoD": 6_020_000, "DtoH": 1_270_000, "memset": 389_000, "DtoD": 4_000},
          "pageable_ns": 1_000_000, "impact_ns": 7_345_000, "material": True, "top_direction": "HtoD"}
    ev.update(changes)
    return ev


def test_memcpy_bound_wording():
    ev = copy_ev()
    d = word("memcpy-bound", None, ev)
    assert fields(rf"memory copies fill (?P<share>{NUM}) % of the step", d.title) == {
        "share": pct(100 * ev["copy_fraction"])}
    m = re.fullmatch(rf"({NUM}) ms of the ({NUM}) ms step ran nothing but copies and sets \(host-to-device ({NUM}) ms, "
                     rf"device-to-host ({NUM}) ms, memory sets ({NUM}) ms\); compute ({NUM}) ms, "
                     rf"communication ({NUM}) ms", d.detail)
    assert m, d.detail
    # DtoD's 4 µs is under the 5 µs listing floor and left out; every other number is its evidence value.
    assert m.groups() == (ms(ev["exposed_copy_ns"]), ms(ev["duration_ns"]), ms(6_020_000), ms(1_270_000),
                          ms(389_000), ms(ev["compute_ns"]), ms(ev["comm_ns"]))
    assert d.advice.startswith("host-to-device copies hold the step up")


@pytest.mark.parametrize("top, pageable, start", [
    ("DtoH", 0, "device-to-host copies"), ("DtoD", 0, "device-to-device copies"), ("memset", 7_000_000, "memory sets"),
    ("other", 0, "memory copies hold the step up"),
    ("HtoD", 3_756_000, "copies from pageable memory"),     # 2 × 3.756 ms ≥ memcpy_ns 7.512 ms: pinning first
    ("HtoD", 3_755_999, "host-to-device copies")])
def test_memcpy_bound_advice_follows_the_direction(top, pageable, start):
    assert word("memcpy-bound", None, copy_ev(top_direction=top, pageable_ns=pageable)).advice.startswith(start)


@pytest.mark.parametrize("top, pageable, start", [
    ("HtoD", 0, "host-to-device copies hold the step up: copy from pinned host buffers (cudaHostAlloc"),
    ("DtoH", 0, "device-to-host copies hold the step up: copy into pinned host buffers with cudaMemcpyAsync"),
    ("memset", 0, "memory sets hold the step up: buffers are cleared every iteration"),
    ("other", 0, "memory copies hold the step up: move them off the critical path (pinned host buffers"),
    ("HtoD", 3_756_000, "copies from pageable memory are staged through a bounce buffer and block the host: "
                        "allocate the host buffers pinned (cudaHostAlloc")])
def test_memcpy_bound_advice_for_a_cuda_program(top, pageable, start):
    d = word("memcpy-bound", None, copy_ev(top_direction=top, pageable_ns=pageable, program="cuda"))
    assert d.advice.startswith(start)
    assert not any(w in d.advice for w in ("pin_memory", "DataLoader", "non_blocking", ".item()", "torch"))


def late_ev(**changes) -> dict:
    """Hand-made cross-rank straggler evidence, every value distinct (the keys crossrank/straggler.py writes)."""
    ev = {"late_count": 11, "instances": 13, "late_share": 0.846, "wait_share": 0.9131, "mean_skew_ns": 1_234_000,
          "caused_wait_ns": 45_670_000, "caused_wait_by_step": [[2, 20_000_000], [3, 25_670_000]],
          "reason": "compute", "lateness_ns": 12_310_000, "late_start_ns": 410_000, "lead_ns": 31_240_000,
          "ranks_lead_ns": 19_020_000, "excess_ns": {"lead": 12_220_000, "compute": 11_110_000, "sync-stall": 0,
                                                     "late-launch": 560_000, "host-gap": 550_000},
          "lead_by_reason_ns": {"compute": 28_880_000, "sync-stall": 10_000, "late-launch": 1_330_000,
                                "host-gap": 1_020_000},
          "ranks_lead_by_reason_ns": {"compute": 17_770_000, "sync-stall": 10_000, "late-launch": 770_000,
                                      "host-gap": 470_000},
          "launched_promptly": 6, "launch_known": 9, "cpu": False, "ranks": 8, "impact_ns": 2_170_000,
          "step_ns": 15_550_000, "material": True}
    return {**ev, **changes}


@pytest.mark.parametrize("reason, words, doing", [
    ("compute", "slower compute", "computing"),
    ("host-gap", "host gaps", "with its device idle and its CPU idle or loading data"),
    ("sync-stall", "a sync stall", "with its device idle after a blocking sync"),
    ("late-launch", "late launches", "with its device idle while its CPU ran ops"),
])
def test_cross_rank_straggler_wording(reason, words, doing):
    ev = late_ev(reason=reason)
    d = word("straggler", reason, ev, step=None)
    m = re.fullmatch(rf"straggler \({words}\): the other ranks wait for it at (\d+) collectives, ({NUM}) ms of "
                     r"waiting in all", d.title)
    assert m and (int(m[1]), m[2]) == (ev["late_count"], ms(ev["caused_wait_ns"]))
    m = re.fullmatch(rf"it arrives last at (\d+) of (\d+) matched collectives, a mean ({NUM}) ms after the first "
                     rf"rank, causing (\d+\.\d) % of the waiting over (\d+) ranks; before the one of each step they waited at longest it spent a mean ({NUM}) ms "
                     rf"{doing} against ({NUM}) ms on the other ranks, of ({NUM}) ms against ({NUM}) ms since they "
                     r"last met \(the previous step's collective, else the step's start\)", d.detail)
    assert m, d.detail
    assert m.groups() == (str(ev["late_count"]), str(ev["instances"]), ms(ev["mean_skew_ns"]),
                          pct(100 * ev["wait_share"]), str(ev["ranks"]), ms(ev["lead_by_reason_ns"][reason]),
                          ms(ev["ranks_lead_by_reason_ns"][reason]), ms(ev["lead_ns"]), ms(ev["ranks_lead_ns"]))
    assert d.advice == wording.reason_advice(reason, False)


def test_cross_rank_straggler_of_unknown_cause():
    ev = late_ev(reason="unknown", mean_skew_ns=None)
    d = word("straggler", "unknown", ev, step=None)
    assert d.title.startswith("straggler (cause unknown): ")
    m = re.fullmatch(rf"it arrives last at 11 of 13 matched collectives, causing 91\.3 % of the waiting over 8 ranks; "
                     rf"at the one of each step they waited at longest it came a mean ({NUM}) ms after the other ranks, but since they last met \(the previous "
                     rf"step's collective, else the step's start\) it took a mean ({NUM}) ms to arrive against ({NUM}) ms on "
                     rf"the others, and no one activity explains the difference; it began its first captured step "
                     rf"({NUM}) ms after the other ranks: look at what it does between steps and before the capture",
                     d.detail)
    assert m and m.groups() == (ms(ev["lateness_ns"]), ms(ev["lead_ns"]), ms(ev["ranks_lead_ns"]),
                                ms(ev["late_start_ns"]))
    # Not known to start late (clocks not aligned, or not late): nothing said about it.
    assert "first captured step" not in word("straggler", "unknown", late_ev(reason="unknown", late_start_ns=None),
                                             step=None).detail


def test_reason_advice_fits_the_backend():
    assert "GPU clocks" in wording.reason_advice("compute", False)
    assert "GPU" not in wording.reason_advice("compute", True) and "OMP_NUM_THREADS" in wording.reason_advice(
        "compute", True)


def clock_ev(**changes) -> dict:
    units = [{"host": "node1", "ranks": [4, 5], "offset_ns": 2_500_123, "spread_ns": 3_400, "corrected": True},
             {"host": None, "ranks": [7], "offset_ns": -61_000, "spread_ns": 812_300, "corrected": False},
             {"host": None, "ranks": [9], "offset_ns": None, "spread_ns": None, "corrected": False}]
    ev = {"reference_rank": 0, "reference_host": "node0", "per_host": False, "units": units,
          "corrected_units": units[:1], "uncertain_units": units[1:], "corrected": 1, "uncertain": 2,
          "max_spread_ns": 50_000}
    return {**ev, **changes}


def test_clock_offset_wording():
    ev = clock_ev()
    d = word("clock-offset", "corrected", ev, step=None)
    assert d.title == "clocks aligned: 1 clock offset corrected against rank 0"
    # The offset in ms with its sign and three decimals, its spread in ms too, as the across-ranks table gives it.
    assert d.detail == ("offsets from the end times of matched collectives: host node1 +2.500 ms ± 0.003 ms; "
                        "cross-rank numbers use the aligned times, each rank's step metrics stay on its own clock")
    d = word("clock-offset", "uncertain", ev, step=None)
    assert d.title == "clocks not aligned: 2 clock offsets too uncertain to correct"
    assert d.detail.startswith("end times of matched collectives against rank 0 spread more than 0.050 ms: "
                               "rank 7 -0.061 ms ± 0.812 ms; rank 9 unknown (no collective shared); ")
# ---------------------------------------------------------------------------------------- overlap-tax

def tax_ev(**changes) -> dict:
    """Hand-made overlap-tax evidence (the keys tax.finding writes), every value distinct."""
    ev = {"overlap_tax_ns": 4_810_000, "overlap_tax_low_ns": 3_170_000, "overlap_tax_high_ns": 5_930_000,
          "confidence": 0.95, "duration_ns": 61_300_000, "tax_fraction": 0.0785, "low_fraction": 0.0517,
          "steps": 4, "overlap_ns": 22_040_000, "exposed_comm_ns": 1_230_000, "effective_exposed_ns": 6_040_000,
          "compared": 17, "identities": 3, "slowed": 2, "uncompared": 6, "varying": 9, "max_spread": 0.25,
          "impact_ns": 1_202_500, "low_impact_ns": 792_500, "material": True,
          "kernels": [{"name": "void gemm_kernel<float>(float const*, float*)", "runs": 12, "alone": 14,
                       "baseline_ns": 101_000, "spread": 0.02, "mean_ns": 143_000, "shift_ns": 41_000,
                       "shift_low_ns": 38_000, "shift_high_ns": 47_000, "tax_ns": 3_970_000,
                       "tax_low_ns": 2_890_000, "tax_high_ns": 4_430_000, "collective": "all_reduce"},
                      {"name": "softmax_kernel", "runs": 5, "alone": 8, "baseline_ns": 52_000, "spread": 0.1,
                       "mean_ns": 61_000, "shift_ns": 9_000, "shift_low_ns": 3_000, "shift_high_ns": 16_000,
                       "tax_ns": 840_000, "tax_low_ns": 280_000, "tax_high_ns": 1_500_000, "collective": None}],
          "left_out": [{"name": "void cutlass::device_kernel<grouped_gemm>(Params)", "reason": "varies", "runs": 29,
                        "time_ns": 13_750_000, "alone": 3, "alone_min_ns": 70_000, "alone_max_ns": 1_517_000,
                        "spread": 5.32},
                       {"name": "void rotary_kernel(float*)", "reason": "too-few", "runs": 11, "time_ns": 48_000,
                        "alone": 1, "alone_min_ns": 2_000, "alone_max_ns": 2_000, "spread": 0.0}]}
    return {**ev, **changes}


def test_overlap_tax_wording():
    ev = tax_ev()
    d = word("overlap-tax", None, ev, step=None)
    assert fields(rf"overlap tax: compute ran (?P<t>{NUM}) ms slower beside communication \((?P<p>\d+\.\d) % of step "
                  rf"time; (?P<c>\d+\.\d) % interval (?P<lo>{NUM}) ms-(?P<hi>{NUM}) ms\)", d.title) == \
        {"t": ms(ev["overlap_tax_ns"]), "p": pct(100 * ev["tax_fraction"]), "c": pct(100 * ev["confidence"]),
         "lo": ms(ev["overlap_tax_low_ns"]), "hi": ms(ev["overlap_tax_high_ns"])}
    k0, k1 = ev["kernels"]
    v0, u0 = ev["left_out"]
    f = fields(rf"(?P<n>\d+) kernels under communication compared with their runs alone, (?P<s>\d+) of (?P<i>\d+) "
               rf"kernel identities slower beyond their spread: gemm_kernel<float> ran (?P<m0>{NUM}) ms instead of "
               rf"(?P<b0>{NUM}) ms alone under all-reduce \((?P<r0>\d+)× against (?P<a0>\d+) runs alone: "
               rf"(?P<s0>{NUM}) ms slower, (?P<sl0>{NUM}) ms-(?P<sh0>{NUM}) ms; (?P<t0>{NUM}) ms\); softmax_kernel "
               rf"ran (?P<m1>{NUM}) ms instead of (?P<b1>{NUM}) ms alone \((?P<r1>\d+)× against (?P<a1>\d+) runs "
               rf"alone: (?P<s1>{NUM}) ms slower, (?P<sl1>{NUM}) ms-(?P<sh1>{NUM}) ms; (?P<t1>{NUM}) ms\); hiding "
               rf"(?P<h>{NUM}) ms of communication cost (?P<t>{NUM}) ms \(at least (?P<lo>{NUM}) ms\), so it really "
               rf"costs (?P<eff>{NUM}) ms \((?P<x>{NUM}) ms exposed \+ tax\); left out: (?P<u>\d+) with too few "
               rf"runs alone to compare, (?P<v>\d+) whose work varies \(runs alone spread over more than "
               rf"(?P<sp>\d+\.\d) % of their median, or without input shapes under communication\), e\.g\. "
               rf"cutlass::device_kernel<grouped_gemm> ran (?P<vmin>{NUM}) ms-(?P<vmax>{NUM}) ms over its "
               rf"(?P<va>\d+) runs alone \((?P<vr>\d+)× under communication\); rotary_kernel \((?P<ua>\d+) run "
               rf"alone, (?P<ur>\d+)× under communication\)", d.detail)
    assert f == {"n": str(ev["compared"]), "s": str(ev["slowed"]), "i": str(ev["identities"]),
                 "m0": ms(k0["mean_ns"]), "b0": ms(k0["baseline_ns"]), "r0": str(k0["runs"]), "a0": str(k0["alone"]),
                 "s0": ms(k0["shift_ns"]), "sl0": ms(k0["shift_low_ns"]), "sh0": ms(k0["shift_high_ns"]),
                 "t0": ms(k0["tax_ns"]), "m1": ms(k1["mean_ns"]), "b1": ms(k1["baseline_ns"]), "r1": str(k1["runs"]),
                 "a1": str(k1["alone"]), "s1": ms(k1["shift_ns"]), "sl1": ms(k1["shift_low_ns"]),
                 "sh1": ms(k1["shift_high_ns"]), "t1": ms(k1["tax_ns"]), "h": ms(ev["overlap_ns"]),
                 "t": ms(ev["overlap_tax_ns"]), "lo": ms(ev["overlap_tax_low_ns"]),
                 "eff": ms(ev["effective_exposed_ns"]), "x": ms(ev["exposed_comm_ns"]), "u": str(ev["uncompared"]),
                 "v": str(ev["varying"]), "sp": pct(100 * ev["max_spread"]), "vmin": ms(v0["alone_min_ns"]),
                 "vmax": ms(v0["alone_max_ns"]), "va": str(v0["alone"]), "vr": str(v0["runs"]),
                 "ua": str(u0["alone"]), "ur": str(u0["runs"])}
    for lever in ("NCCL_MAX_CTAS", "NCCL_NCHANNELS_PER_NET_PEER", "copy-engine collectives", "bucket_cap_mb",
                  "CUDA_DEVICE_MAX_CONNECTIONS", "priority"):
        assert lever in d.advice
    # Every overlapped kernel compared: nothing said about the rest.
    assert "left out" not in word("overlap-tax", None, tax_ev(uncompared=0, varying=0, left_out=[]), step=None).detail
    assert "1 of 1 kernel identity slower" in word("overlap-tax", None, tax_ev(slowed=1, identities=1)).detail
    only_few = word("overlap-tax", None, tax_ev(varying=0, left_out=[u0]), step=None).detail
    assert "too few runs alone" in only_few and "varies" not in only_few


# ---------------------------------------------------------------------------------------- hidden-comm

def hidden_ev(**changes) -> dict:
    """Hand-made hidden-comm evidence (the keys hidden_comm.analyze writes), every value distinct."""
    ev = {"scopes": 14, "scopes_without_comm": 9, "world_size": 8, "backend": "nccl", "comm_ns": 2_340_000,
          "scope_names": [{"name": "c10d::allreduce_", "count": 7}, {"name": "nccl:all_gather", "count": 2}],
          "launched": [{"name": "Memset (Device)", "kind": "memset", "count": 5, "time_ns": 61_000}],
          "look_alike": [{"name": "void flux::gemm_rs_kernel<half>(flux::Params)", "kind": "compute", "count": 11,
                          "time_ns": 3_190_000}],
          "look_alike_ns": 3_190_000, "comm_pattern": "flux::gemm_rs_kernel", "impact_ns": 1_063_000,
          "material": True}
    return {**ev, **changes}


def test_hidden_comm_no_comm_kernel_wording():
    ev = hidden_ev()
    d = word("hidden-comm", "no-comm-kernel", ev, step=None)
    assert fields(r"hidden communication: (?P<n>\d+) collective calls but no communication on the device",
                  d.title) == {"n": str(ev["scopes"])}
    f = fields(rf"(?P<k>\d+) of (?P<n>\d+) collective scopes \(c10d::allreduce_ ×(?P<a>\d+), nccl:all_gather "
               rf"×(?P<b>\d+)\) have no communication kernel or copy; launched inside them: Memset \(Device\) "
               rf"\(memset, (?P<mc>\d+)×, (?P<mt>{NUM}) ms\); kernels named like communication: "
               rf"flux::gemm_rs_kernel<half> \(compute, (?P<lc>\d+)×, (?P<lt>{NUM}) ms\)", d.detail)
    assert f == {"k": "9", "n": "14", "a": "7", "b": "2", "mc": "5", "mt": ms(61_000), "lc": "11", "lt": ms(3_190_000)}
    assert d.advice == ("if they move data between GPUs, count them as communication: tracelens report "
                        "--comm-pattern 'flux::gemm_rs_kernel'; until then overlap and exposed communication "
                        "leave them out")
    bare = word("hidden-comm", "no-comm-kernel", hidden_ev(launched=[], look_alike=[], comm_pattern=None), step=None)
    assert bare.detail.endswith("; no device work is linked to them and no kernel is named like communication")
    assert "--comm-pattern REGEX" in bare.advice


def test_hidden_comm_look_alike_wording():
    ev = hidden_ev()
    d = word("hidden-comm", "look-alike", ev, step=None)
    assert d.title == "hidden communication: kernels named like communication count as compute"
    f = fields(rf"flux::gemm_rs_kernel<half> \(compute, (?P<c>\d+)×, (?P<t>{NUM}) ms\) ran as compute "
               rf"\((?P<all>{NUM}) ms in all\) in a run that communicates \((?P<n>\d+) collective calls; "
               rf"(?P<comm>{NUM}) ms classified as communication\)", d.detail)
    assert f == {"c": "11", "t": ms(3_190_000), "all": ms(ev["look_alike_ns"]), "n": str(ev["scopes"]),
                 "comm": ms(ev["comm_ns"])}
    # Without collective calls, the world size is why the run communicates.
    assert "(world size 8; " in word("hidden-comm", "look-alike", hidden_ev(scopes=0), step=None).detail


# ------------------------------------------------------------------------------------- nccl-transport

def transport_ev(**changes) -> dict:
    """Hand-made nccl-transport evidence (the keys transport.analyze writes), every value distinct."""
    ev = {"verdict": "tcp_no_rdma", "multi_node": True, "nccl_version": "2.27.3", "net": "IBext_v8",
          "communicators": 3, "logs": 5,
          "lines": [{"file": "run/nccl/h1.17.log", "line": 42, "text": "h1:17:18 [0] NCCL INFO Using network Socket"},
                    {"file": "run/manifest.json", "line": None, "text": "NCCL_IB_HCA=mlx5_3"}],
          "forced_by": ["NCCL_IB_DISABLE=1", "NCCL_NET=Socket"],
          "bandwidth": {"p50_gbps": 2.3456, "collectives": 37, "range": "tcp", "tcp_max_gbps": 4.5,
                        "rdma_min_gbps": 16.0}, "bandwidth_disagrees": False}
    return {**ev, **changes}


QUOTED = 'h1.17.log:42 "Using network Socket"; manifest.json "NCCL_IB_HCA=mlx5_3"'
BANDWIDTH = "inter-node bus bandwidth 2.35 GB/s (median of 37 collectives), in the TCP range (below 4.5 GB/s)"


@pytest.mark.parametrize("verdict, title, lead", [
    ("tcp_silent_fallback", "network transport: TCP sockets between nodes, a silent fallback from RDMA",
     "NCCL fell back to TCP sockets where RDMA was expected"),
    ("tcp_no_rdma", "network transport: TCP sockets between nodes, no RDMA found",
     "NCCL uses TCP sockets between nodes and found no RDMA device"),
    ("tcp_deliberate", "network transport: TCP sockets, chosen deliberately",
     "TCP was forced by NCCL_IB_DISABLE=1 and NCCL_NET=Socket"),
    ("tcp_suspected", "network transport: TCP suspected from the bandwidth",
     "no NCCL log line says which transport was used"),
    ("rdma_gdr", "network transport: RDMA (IBext_v8) with GPUDirect RDMA",
     "network connections use RDMA straight from GPU memory"),
    ("rdma_host_staged", "network transport: RDMA (IBext_v8) without GPUDirect, staged through host memory",
     "network connections use RDMA without /GDRDMA"),
    ("rdma_init_only", "network transport: RDMA (IBext_v8) initialised, no connection lines",
     "NCCL set up an RDMA network"),
    ("intra_node_only", "network transport: not used, every connection stays within one node",
     "no connection leaves the node"),
    ("inconclusive", "network transport: inconclusive from the NCCL logs",
     "the lines read do not say which transport carried traffic between nodes"),
    ("unknown", "network transport: unknown (no NCCL logs)", "no NCCL log was given"),
])
def test_nccl_transport_wording(verdict, title, lead):
    d = word("nccl-transport", verdict, transport_ev(verdict=verdict), step=None)
    # Each deciding line by file name and number (a setting by its source), then the bandwidth evidence.
    assert (d.title, d.detail) == (title, f"{lead}: {QUOTED}; {BANDWIDTH}")
    bare = word("nccl-transport", verdict, transport_ev(verdict=verdict, lines=[], bandwidth=None), step=None)
    assert bare.detail == lead


def test_nccl_transport_advice():
    def advice(verdict, **changes):
        return word("nccl-transport", verdict, transport_ev(verdict=verdict, **changes), step=None).advice

    for v in ("tcp_silent_fallback", "tcp_no_rdma"):
        assert all(w in advice(v) for w in ("ibv_devinfo", "/dev/infiniband", "NCCL_IB_HCA", "NCCL_NET_PLUGIN"))
    assert advice("tcp_deliberate").startswith("intended by NCCL_IB_DISABLE=1 and NCCL_NET=Socket")
    assert "NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET" in advice("tcp_suspected")
    assert advice("rdma_gdr") == "" and advice("intra_node_only") == ""
    # Logs that say RDMA next to TCP-range bandwidth: the sentence says so, the advice starts with it.
    d = word("nccl-transport", "rdma_gdr", transport_ev(verdict="rdma_gdr", bandwidth_disagrees=True), step=None)
    assert d.detail.endswith(BANDWIDTH + " although the logs say RDMA")
    assert d.advice.startswith("the logs and the bandwidth disagree")
    assert "(IBext_v8)" not in word("nccl-transport", "rdma_gdr", transport_ev(net=None), step=None).title


def slow_link_ev(**changes) -> dict:
    """Hand-made slow-link evidence, every value distinct (the keys slow_links.find writes)."""
    ev = {"comm": "0xp000002", "comm_name": "pair2", "op": "all_reduce", "bytes_min": 16 << 20,
          "bytes_max": 24 << 20, "layout": "two-hosts", "ranks": [32, 33, 34, 35, 40, 41], "hosts": ["n4", "n5"],
          "instances": 15, "busbw_gbps": 39.3216, "peers_busbw_gbps": 157.2864, "share": 0.2467,
          "peer_comms": 3, "peers_listed": ["0xp0", "0xp1", "0xp3"], "peer_instances": 45,
          "transfer_ns": 12_345_000, "lost_ns": 9_012_000, "max_share": 0.5, "min_instances": 6,
          "saving_ns": None, "saving_note": "the lever is outside the job"}
    return {**ev, **changes}


def test_slow_link_wording():
    d = word("slow-link", None, slow_link_ev(), step=None)
    assert d.title == ("slow link: communicator 0xp000002 (pair2) between hosts n4 and n5 runs at 39.32 GB/s bus "
                       "bandwidth, 24.7 % of its peers' 157.29 GB/s")
    assert d.detail == (
        "15 all-reduces of 16.0 MiB-24.0 MiB of ranks 32–35, 40–41 (members on two hosts), against 45 instances of 3 other "
        "communicators of the same op, size bucket and layout (median busbw below 50.0 % of theirs, at least 6 "
        "instances each); their transfers took 12.345 ms, 9.012 ms more than at the peers' bus bandwidth. What "
        "mending it saves per step is unknown: the lever is outside the job")
    # Levers on the link between those hosts, never on compute.
    assert d.advice.startswith("check the links between hosts n4 and n5: the NICs")
    assert all(w in d.advice for w in ("NCCL_IB_HCA", "nccl-tests", "switch ports", "NET/IB or NET/Socket"))
    assert not any(w in d.advice for w in ("compute", "bucket", "overlap"))
    one = word("slow-link", None, slow_link_ev(layout="one-host", hosts=["n4"], comm_name=None, peer_comms=1,
                                               bytes_max=16 << 20), step=None)
    assert one.title.startswith("slow link: communicator 0xp000002 on host n4 runs at")
    assert "of 16.0 MiB of" in one.detail and "against 45 instances of 1 other communicator of" in one.detail
    assert "(members on one host)" in one.detail
    assert one.advice.startswith("check the links on host n4: NVLink or PCIe") and "NCCL_P2P_DISABLE" in one.advice
    many = word("slow-link", None, slow_link_ev(layout="many-hosts", hosts=[f"n{i}" for i in range(6)]), step=None)
    assert "across 6 hosts (n0, n1, n2, n3 and 2 more) runs at" in many.title


def dimension_ev(**changes) -> dict:
    """Hand-made parallelism evidence, every value distinct (the keys dimensions.findings writes)."""
    ev = {"dimension": "tp", "exposed_comm_ns": 3_456_000, "comm_ns": 7_891_000, "overlap_pct": 56.2,
          "exposed_fraction": 0.1234, "duration_ns": 28_007_000, "steps": 3, "collectives": 47,
          "groups": ["TENSOR_MODEL_PARALLEL_GROUP", "5"], "ops": ["all_gather", "reduce_scatter"],
          "group_size": 4, "idle_ns": 2_222_000, "worst_step": 11, "max_connections": None}
    return {**ev, **changes}


@pytest.mark.parametrize("dim, name", [("dp", "data parallel"), ("fsdp", r"sharded data parallel \(FSDP\)"),
                                       ("tp", "tensor parallel"), ("pp", "pipeline parallel"),
                                       ("ep", "expert parallel"), ("emb", "sharded embedding"),
                                       ("cp", "context parallel"),
                                       ("unknown", "unattributed")])
def test_parallelism_wording(dim, name):
    ev = dimension_ev(dimension=dim)
    d = word("parallelism", dim, ev, step=None)
    f = fields(rf"{name} communication exposed: (?P<e>{NUM}) ms \((?P<p>\d+\.\d) % of step time\)", d.title)
    assert (f["e"], f["p"]) == (ms(ev["exposed_comm_ns"]), pct(100 * ev["exposed_fraction"]))
    f = fields(rf"(?P<n>\d+) collectives \(all-gather, reduce-scatter\) in TENSOR_MODEL_PARALLEL_GROUP, 5: "
               rf"(?P<c>{NUM}) ms of communication over (?P<s>\d+) steps, (?P<h>\d+\.\d) % hidden; most exposed in "
               rf"step (?P<w>\d+)", d.detail)
    assert (int(f["n"]), f["c"], int(f["s"]), f["h"], int(f["w"])) == (
        ev["collectives"], ms(ev["comm_ns"]), ev["steps"], pct(ev["overlap_pct"]), ev["worst_step"])


def test_parallelism_wording_of_a_whole_trace_window_and_unnamed_groups():
    # nsys-ai mfu_2gpu_before (a whole-trace window, all-to-alls of no named group) once read "in ?: ... over
    # 1 steps, ...; most exposed in step None".
    ev = dimension_ev(dimension="ep", groups=[], steps=1, worst_step=None, collectives=1, ops=["all_to_all"])
    d = word("parallelism", "ep", ev, step=None)
    f = fields(rf"1 collective \(all-to-all\) in no named process group: (?P<c>{NUM}) ms of communication over "
               rf"1 step, (?P<h>\d+\.\d) % hidden", d.detail)
    assert (f["c"], f["h"]) == (ms(ev["comm_ns"]), pct(ev["overlap_pct"]))


def test_parallelism_advice_per_dimension():
    advice = {d: word("parallelism", d, dimension_ev(dimension=d), step=None).advice
              for d in ("dp", "fsdp", "tp", "pp", "ep", "emb", "cp", "unknown")}
    assert "bucket_cap_mb" in advice["dp"] and "no_sync()" in advice["dp"]
    assert all(k in advice["fsdp"] for k in ("backward_prefetch", "limit_all_gathers", "reshard_after_forward"))
    assert "ub_overlap_ag" in advice["tp"] and "--tp-comm-overlap" in advice["tp"]
    assert "all-to-all" in advice["ep"] and "ring-attention" in advice["cp"] and "group_desc" in advice["unknown"]
    # Sharded embeddings: the pipelined input distribution and smaller all-to-alls, never expert or bucket advice
    assert "TrainPipelineSparseDist" in advice["emb"] and "qcomm" in advice["emb"]
    assert not any(w in advice["emb"] for w in ("DeepEP", "expert", "bucket_cap_mb"))
    # The numbers the advice states: the PP group size and the steps' idle time; the recorded
    # CUDA_DEVICE_MAX_CONNECTIONS, or that there is none.
    ev = dimension_ev(dimension="pp")
    m = re.search(rf"\((\d+) − 1\)\(F \+ B\) per step, \((\d+) − 1\)/\(m \+ (\d+) − 1\).* idle ({NUM}) ms "
                  r"in these steps$", advice["pp"])
    assert m and {int(m[1]), int(m[2]), int(m[3])} == {ev["group_size"]} and m[4] == ms(ev["idle_ns"])
    assert "(PP − 1)(F + B)" in word("parallelism", "pp", dimension_ev(dimension="pp", group_size=None)).advice
    # With the micro-batches the trace shows, the plain-1F1B bubble they give
    ev = dimension_ev(dimension="pp", stage=2, micro_batches=6, expected_bubble=0.3333)
    m = re.search(rf"with m micro-batches \(stage (\d+) sends for (\d+) micro-batches a step: (\d+\.\d) % of the "
                  r"step if it is plain 1F1B\):", word("parallelism", "pp", ev).advice)
    assert m and (int(m[1]), int(m[2]), m[3]) == (ev["stage"], ev["micro_batches"], pct(100 * ev["expected_bubble"]))
    assert advice["tp"].endswith("(CUDA_DEVICE_MAX_CONNECTIONS is not recorded)")
    for dim in ("tp", "ep"):
        got = word("parallelism", dim, dimension_ev(dimension=dim, max_connections="8")).advice
        assert got.endswith("(CUDA_DEVICE_MAX_CONNECTIONS=8 was recorded)")


def test_bucket_size_wording():
    ev = {"buckets": 14, "step": 6, "backward_ns": 31_250_000, "latency_ns": 87_000, "gbps": 12.34,
          "observed_exposed_ns": 4_321_000, "model_exposed_ns": 3_987_000, "suggested_cap_mib": 5,
          "suggested_exposed_ns": 612_000, "gain_ns": 3_709_000, "duration_ns": 45_000_000, "impact_ns": 3_709_000,
          "material": True}
    d = word("bucket-size", None, ev, step=None)
    f = fields(rf"bucket size: bucket_cap_mb=(?P<cap>\d+) would expose (?P<s>{NUM}) ms of all-reduce per step "
               rf"instead of (?P<o>{NUM}) ms", d.title)
    assert (int(f["cap"]), f["s"], f["o"]) == (ev["suggested_cap_mib"], ms(ev["suggested_exposed_ns"]),
                                               ms(ev["observed_exposed_ns"]))
    f = fields(rf"the WFBP model of step (?P<st>\d+)'s (?P<n>\d+) buckets \(backward (?P<b>{NUM}) ms, each "
               rf"all-reduce (?P<a>{NUM}) ms \+ its size at (?P<g>{NUM}) GB/s\) gives (?P<m>{NUM}) ms exposed for "
               r"the buckets as they are", d.detail)
    assert (int(f["st"]), int(f["n"]), f["b"], f["a"], f["g"], f["m"]) == (
        ev["step"], ev["buckets"], ms(ev["backward_ns"]), ms(ev["latency_ns"]), f"{ev['gbps']:.1f}",
        ms(ev["model_exposed_ns"]))
    assert d.advice.startswith(f"set DistributedDataParallel(bucket_cap_mb={ev['suggested_cap_mib']}) and compare")


def test_config_mismatch_wording():
    ev = {"setting": "NCCL_ALGO", "source": "environment", "configured": "Tree", "observed": "RING",
          "contradiction": "the kernels ran other ones"}
    d = word("config-mismatch", None, ev, step=None)
    assert d.title == "NCCL_ALGO=Tree does not match the trace"
    assert d.detail == "NCCL_ALGO=Tree (environment), the trace shows RING: the kernels ran other ones"
    assert "reaches the training processes" in d.advice


def _outlier_ev(cause: str, **worst) -> dict:
    x = {"rank": 3, "step": 14, "duration_ns": 9_000_000, "excess_ns": 8_000_000, "cause": cause,
         "lead_ns": 20_444_000, "usual_lead_ns": 25_968_000, "late_rank": cause == "wait",
         "wait_ns": 8_000_000 if cause in ("wait", "transfer") else None,
         "transfer_ns": 1_000_000 if cause in ("wait", "transfer") else None, **worst}
    return {"op": "all_reduce", "pg": "0", "bytes_min": 25 * 2**20, "bytes_max": 26 * 2**20, "matched": True,
            "instances": 80, "outliers": 12, "median_ns": 1_000_000, "limit_ns": 2_000_000,
            "k": 5.0, "min_excess_ns": 1_000_000, "causes": {cause: 12}, "late_ranks": {3: 12} if cause == "wait" else {},
            "excess_ns": 96_000_000, "exposed_excess_ns": 90_000_000, "steps": 20, "step_ns": 50_000_000,
            "cost_per_step_ns": 4_500_000, "impact_ns": 4_500_000, "material": True, "worst": x, "listed": [x] * 10}


@pytest.mark.parametrize("cause", ["wait", "transfer", "early", "unknown"])
def test_outlier_wording(cause):
    ev = _outlier_ev(cause)
    d = word("outlier", cause, ev, step=14)
    assert d.title == ("12 of 80 all-reduces of 25.0 MiB-26.0 MiB in group 0 took far longer than their median "
                       "1.000 ms: worst 9.000 ms at rank 3, step 14")
    assert "outlier above 2.000 ms (its kind's median plus 5 robust deviations, and at least 1.000 ms more)" in d.detail
    assert "90.000 ms of it exposed, 4.500 ms per step over 20 steps" in d.detail
    assert "; and 2 more" in d.detail                       # 12 outliers, 10 listed
    if cause == "wait":
        assert "(late: rank 3 in 12)" in d.detail and "(the rank the others waited for)" in d.detail
        assert d.advice.startswith("open rank 3 at step 14 in the timeline")
    elif cause == "early":
        assert "came after 20.444 ms instead of the usual 25.968 ms" in d.detail and d.advice == ""
    elif cause == "transfer":
        assert "waited 8.000 ms, transfer 1.000 ms" in d.detail and "slow on every member" in d.advice
    else:
        assert "1 rank" not in d.detail and "report this rank's peers" in d.advice


def _drift_ev(quantity="exposed_comm_ns", driver="transfer", culprit=None) -> dict:
    part = {"first_ns": 1_000_000, "last_ns": 3_000_000, "change": 1.0, "slope_ns": 50_000.0, "confidence": 0.999}
    return {"quantity": quantity, "driver": driver, "culprit": culprit, "direction": "grew", "steps": 40,
            "first_step": 2, "last_step": 41, "tenth": 4, "slope_ns": 50_000.0, "confidence": 0.9995,
            "first_ns": 1_000_000, "last_ns": 3_000_000, "median_ns": 2_000_000, "change": 1.0, "min_change": 0.1,
            "min_confidence": 0.99, "inferred": True, "ranks": 4, "drifting_ranks": 3,
            "listed_ranks": [{"rank": 0, "change": 1.0}], "exposed_comm_ns": part, "duration_ns": part,
            "compute_ns": part, "wait_ns": None, "impact_ns": 2_000_000, "step_ns": 10_000_000, "material": True}


@pytest.mark.parametrize("driver, advice", [
    ("transfer", "the network or a link slowed"), ("wait", "a rank slowed as the run went on"),
    ("unsplit", "report the other ranks with this one")])
def test_drift_wording(driver, advice):
    d = word("drift", "exposed-comm", _drift_ev(driver=driver), step=None)
    assert d.title == ("exposed communication grew from 1.000 ms to 3.000 ms per step over steps 2–41 (100.0 % of "
                       "its median)")
    assert "Theil-Sen slope 0.050 ms per step, 100.0 % confidence" in d.detail       # 0.9995 at one decimal
    assert "step time 1.000 ms → 3.000 ms; compute 1.000 ms → 3.000 ms." in d.detail  # wait_ns: none, left out
    assert "3 of 4 ranks drift as much on their own: rank 0 (100.0 %)." in d.detail
    assert "The steps were inferred" in d.detail and d.advice.startswith(advice)


def test_drift_names_the_culprit_and_leaves_compute_alone():
    d = word("drift", "exposed-comm", _drift_ev(driver="wait", culprit=5), step=None)
    assert d.advice.startswith("rank 5 (the rank the others wait for) slowed")
    d = word("drift", "step-time", _drift_ev(quantity="duration_ns", driver="compute"), step=None)
    assert d.title.startswith("step time grew") and "it is not communication's" in d.detail and d.advice == ""


def _collective_drift_ev(driver="transfer", culprit=None, busbw=(80.0, 40.0)) -> dict:
    """Hand-made evidence of a drift over a kind of collective's instances (logs alone), values distinct."""
    part = {"change": 0.5, "slope_ns": 1_000.0, "confidence": 0.999}
    return {"quantity": "collective_ns", "driver": driver, "culprit": culprit, "direction": "grew",
            "instances": 160, "tenth": 16, "pg": "0xabc", "op": "all_reduce", "bytes": 25 * 2**20, "members": 4,
            "slope_ns": 6_250.0, "confidence": 0.9995, "first_ns": 537_500, "last_ns": 1_437_500,
            "median_ns": 987_000, "change": 0.912, "min_change": 0.1, "min_confidence": 0.99,
            "wait_ns": {**part, "first_ns": 11_000, "last_ns": 22_000},
            "transfer_ns": {**part, "first_ns": 526_000, "last_ns": 1_415_000},
            "first_busbw_gbps": busbw[0], "last_busbw_gbps": busbw[1], "impact_ns": 900_000, "material": True}


@pytest.mark.parametrize("driver,culprit,advice", [
    ("transfer", None, "the transfers themselves slowed over the run"),
    ("wait", 3, "rank 3 came later and later to these collectives"),
    ("unknown", None, "")])
def test_collective_drift_wording(driver, culprit, advice):
    d = word("drift", "collective-time", _collective_drift_ev(driver, culprit), step=None)
    assert d.title == ("160 all-reduces of 25.0 MiB in group 0xabc took longer as the run went on: 0.537 ms → 1.438 ms "
                       "a member (91.2 % of their median)")
    assert "the first and last 16 instances compared (medians 0.537 ms and 1.438 ms, median of all 0.987 ms)" in d.detail
    assert "Theil-Sen slope 0.006 ms per instance, 100.0 % confidence" in d.detail      # 0.9995 at one decimal
    assert ("wait for peers 0.011 ms → 0.022 ms, transfer 0.526 ms → 1.415 ms; bus bandwidth 80.0 → 40.0 GB/s."
            in d.detail)
    assert "whether this time was hidden behind it is unknown" in d.detail
    assert d.advice.startswith(advice) and (d.advice == "") == (advice == "")
    # No busbw (no size known): nothing said of it.
    assert "bus bandwidth" not in word("drift", "collective-time", _collective_drift_ev(busbw=(None, None))).detail


def test_logs_only_headline():
    # Hand-made values, distinct: the culprit's caused wait and the slowest bucket (op, the sizes seen in it,
    # busbw): one size is said as itself, two as a range.
    line = wording.logs_headline(5, 157_500_000, ("all_reduce", 25 * 2**20, 25 * 2**20, 91.83))
    m = re.fullmatch(rf"Rank (\d+) is the one the others wait for \(({NUM}) ms of waiting caused\); the slowest "
                     rf"transfers: (\w+) of ({NUM}) MiB at ({NUM}) GB/s busbw\. From NCCL Inspector logs "
                     r"alone: whether communication is hidden behind compute is unknown without traces\.", line)
    assert m.groups() == ("5", ms(157_500_000), "all_reduce", "25.0", "91.8"), line
    assert "of 20.0 MiB–30.0 MiB at" in wording.logs_headline(5, 1, ("all_reduce", 20 * 2**20, 30 * 2**20, 91.83))
    assert wording.logs_headline(None, 0, None).startswith("No single rank is the one the others wait for. ")
    # Nothing matched (logs timed on the CPU only, one rank's logs): unknown, not "no one".
    assert wording.logs_headline(None, 0, None, matched=0).startswith(
        "No collective was matched across ranks (the warnings say why): who waits for whom is unknown. ")
    # A slow link is named instead of the slowest transfers: its communicator, hosts, busbw and share.
    link = slow_link_ev()
    line = wording.logs_headline(5, 157_500_000, ("all_reduce", 25 * 2**20, 25 * 2**20, 91.83), link)
    assert line == ("Rank 5 is the one the others wait for (157.500 ms of waiting caused); the slow link: communicator "
                    "0xp000002 (pair2) between hosts n4 and n5 at 39.32 GB/s busbw, 24.7 % of its peers' (9.012 ms "
                    "lost). From NCCL Inspector logs alone: whether communication is hidden behind compute is unknown "
                    "without traces.")


def test_straggler_from_logs_wording():
    # Hand-made evidence of a late rank known from Inspector logs: no lead, so no reason is claimed.
    ev = {"late_count": 11, "instances": 12, "caused_wait_ns": 157_500_000, "mean_skew_ns": 1_875_000,
          "wait_share": 0.973, "ranks": 8, "reason": "unknown", "cpu": False, "from_logs": True}
    d = wording.diagnosis(Finding(id="straggler", severity="info", rank=5, step=None, verdict="unknown", evidence=ev))
    assert d.title == f"straggler: the other ranks wait for it at 11 collectives, {ms(157_500_000)} ms of waiting in all"
    assert d.detail == (f"it arrives last at 11 of 12 matched collectives, a mean {ms(1_875_000)} ms after the first "
                        f"rank, causing {pct(97.3)} % of the waiting over 8 ranks; what it does before arriving is not "
                        "in NCCL Inspector logs (no compute, no launches)")
    assert d.advice.startswith("profile rank 5 ")


def test_a_culprit_without_a_trace_in_the_headline_and_lever():
    from tracelens.contract import Cause, Culprit

    # Hand-made: rank 5 known from its Inspector log only, ranks 0-3 traced and waiting 2.5 ms per step of 14 ms.
    late = Culprit(rank=5, reason="unknown")
    cause = Cause(cause="peer-wait", ns_per_step=2_500_000, share_of_step=2_500_000 / 14_000_000, ranks=[0, 1, 2, 3],
                  culprit=late, lever="")
    line = wording.headline(cause, cause, [0, 1, 2, 3], step_ns=14_000_000, untraced=(4, 5, 6, 7))
    assert line == (f"Waiting for rank 5 costs {ms(2_500_000)} ms per step ({pct(100 * 2_500_000 / 14_000_000)} % "
                    "of the step): ranks 0–3 wait for it at their collectives, and it arrives last for a reason only "
                    "a trace of it would show (its NCCL Inspector log holds no compute).")
    assert wording.lever("peer-wait", late, None, None, False, False, (5,)).startswith("rank 5: profile it too")
    # The same culprit with a trace of its own keeps the advice its reason gives.
    assert "profile it too" not in wording.lever("peer-wait", late, None, None, False, False, ())
