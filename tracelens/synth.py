"""Synthetic Kineto traces with exactly known metrics (the ground truth of the test suite).

A :class:`Scenario` describes DDP-style training steps: forward kernels, then backward buckets (compute,
then that bucket's all-reduce), then an optimizer kernel that waits for all communication. Comm runs on
its own stream (wait-free backpropagation: bucket i's all-reduce starts at max(bucket ready, comm stream
free)) or on the compute stream (serialised). :func:`write` lays the scenario out as one Kineto file per
rank; :func:`expected` computes the metrics from the timing model by arithmetic, independently of the
interval algebra the analyzer uses.

Timing model and worked numbers: shared reference ``metrics.md`` §6 (WFBP).

    python -m tracelens.synth wfbp_100 sample_traces/wfbp_100
"""

from __future__ import annotations

import gzip
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

US = 1_000            # ns per µs
MS = 1_000_000        # ns per ms
BASE_NS = 1_767_225_600_000_000_000   # 2026-01-01T00:00:00Z, a quarter start like Kineto's base
LEGACY_EPOCH_NS = 1_669_783_687_000_000_000
COMPUTE_STREAM, COMM_STREAM = 7, 13
HOST_SLOT = 10 * US   # host time per launch (room for the nested ops around it)
LAUNCH_LATENCY = 5 * US   # explicit-launch scenarios: a kernel starts at least this long after its launch
SYNC_RETURN = 2 * US      # a synchronize call returns this long after the device drained
ITEM_BYTES = 4
EXPECTED_FILE = "metrics.expected"


@dataclass
class Scenario:
    name: str
    buckets: list[tuple[int, int]]          # (backward compute ns, all-reduce ns) per bucket, last layer first
    steps: int = 3
    forward_ns: list[int] = field(default_factory=lambda: [500 * US] * 4)
    optimizer_ns: int = 300 * US
    comm_on_compute_stream: bool = False
    ranks: int = 2
    clock_offsets_ns: list[int] = field(default_factory=lambda: [0, 123_457])
    rank_slowdown: list[float] = field(default_factory=lambda: [1.0, 1.0])
    step_gap_ns: int = 400 * US
    first_step: int = 2
    era: str = "modern"                     # "modern": relative float µs + base; "legacy": epoch integer µs
    bucket_bytes: int = 25 * 2**20
    # Diagnosis scenarios (host launches modelled one by one, see _explicit_step):
    item_after_bucket: int = -1             # .item() after launching this bucket's backward kernel
    item_idle_ns: int = 0                   # host work between the sync's return and the next launch
    wgrad_ns: int = 0                       # a weight-gradient kernel after each bucket's backward kernel
    launch_issue: str = ""                  # "queued": all-reduce launched before wgrad, starts after it;
                                            # "late": all-reduce launched late_ns after wgrad started
    late_ns: int = 0
    env: dict = field(default_factory=dict)  # process environment an nsys export records (META_DATA_CAPTURE)
    # The CPU runs this many steps ahead of the GPU (see _pipelined): when the capture begins, the device
    # still has that many earlier steps queued, launched before the capture (their launches are not in it).
    gpu_lag_steps: int = 0

    @property
    def explicit(self) -> bool:
        return self.item_after_bucket >= 0 or self.wgrad_ns > 0

    def offset(self, rank: int) -> int:
        return self.clock_offsets_ns[rank % len(self.clock_offsets_ns)]

    def slowdown(self, rank: int) -> float:
        return self.rank_slowdown[rank % len(self.rank_slowdown)]


SCENARIOS = {
    # metrics.md §6: 100 buckets of 0.1 ms compute / 0.12 ms comm -> comm-bound, 2.1 ms exposed.
    "wfbp_100": Scenario("wfbp_100", [(100 * US, 120 * US)] * 100),
    # One bucket: all communication after the last backward kernel, nothing hidden.
    "one_bucket": Scenario("one_bucket", [(10 * MS, 12 * MS)]),
    # Eight 5 ms buckets with 0.5 ms all-reduces: compute-bound, only the last one exposed.
    "compute_bound_8": Scenario("compute_bound_8", [(5 * MS, 500 * US)] * 8),
    # Comm kernels on the compute stream between backward kernels: interleaved but never concurrent.
    "serialized": Scenario("serialized", [(1 * MS, 400 * US)] * 8, comm_on_compute_stream=True),
    # Older traces: integer epoch µs, old distributedInfo, no collective args on kernels.
    "legacy_wfbp": Scenario("legacy_wfbp", [(2 * MS, 1500 * US)] * 6, era="legacy", clock_offsets_ns=[0, 37 * US]),
    # A slower rank (straggler) with a clock offset: per-rank metrics must not depend on the offset.
    "straggler": Scenario("straggler", [(2 * MS, 1 * MS)] * 6, ranks=4,
                          clock_offsets_ns=[0, 250_001, -99_999, 1_000_003], rank_slowdown=[1.0, 1.0, 1.0, 1.3]),
    # .item() after the 4th backward kernel: the host blocks until the compute stream drains, then spends
    # 400 µs before launching again, while the previous bucket's all-reduce was in flight.
    "item_mid_backward": Scenario("item_mid_backward", [(1 * MS, 600 * US)] * 8, item_after_bucket=3,
                                  item_idle_ns=400 * US),
    # Exposed all-reduce queued behind a weight-gradient GEMM launched after it (hardware queues).
    "queued_comm": Scenario("queued_comm", [(1 * MS, 800 * US)] * 4, wgrad_ns=1500 * US, launch_issue="queued"),
    # All-reduce launched 1 ms after the weight-gradient GEMM it could have overlapped had started.
    "late_comm": Scenario("late_comm", [(1 * MS, 800 * US)] * 4, wgrad_ns=1500 * US, launch_issue="late",
                          late_ns=1 * MS),
    # A well-pipelined job: the CPU runs one (two) steps ahead of the GPU, so the capture opens with one (two)
    # steps of device work launched before it, and every step's work runs while the CPU is in later steps.
    "gpu_behind_1": Scenario("gpu_behind_1", [(1 * MS, 400 * US)] * 4, first_step=3, gpu_lag_steps=1),
    "gpu_behind_2": Scenario("gpu_behind_2", [(1 * MS, 400 * US)] * 4, first_step=3, gpu_lag_steps=2),
}


@dataclass
class _Kernel:
    name: str
    stream: int
    start: int
    end: int
    comm: bool = False
    launch: int = -1                        # host launch time; -1: assigned in device order by _timeline
    memcpy: bool = False                    # the device-to-pageable copy of an .item()


@dataclass
class _Sync:
    """``aten::item`` → ``aten::_local_scalar_dense`` → cudaMemcpyAsync + cudaStreamSynchronize."""

    copy: _Kernel
    start: int                              # cudaStreamSynchronize call
    end: int


def _comm_name(sc: Scenario) -> str:
    if sc.era == "legacy":
        return "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
    return "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"


def _step_kernels(sc: Scenario, rank: int, t0: int) -> list[_Kernel]:
    """Device timeline of one step starting at t0 (first kernel start)."""
    slow = sc.slowdown(rank)
    out, t = [], t0
    for i, d in enumerate(sc.forward_ns):
        d = int(d * slow)
        out.append(_Kernel(f"void fwd_gemm_kernel_{i}<float>(float const*, float*)", COMPUTE_STREAM, t, t + d))
        t += d
    comm_free = t
    for i, (c, m) in enumerate(sc.buckets):
        c = int(c * slow)
        out.append(_Kernel(f"void bwd_gemm_kernel_{i}<float>(float const*, float*)", COMPUTE_STREAM, t, t + c))
        t += c
        name = _comm_name(sc)
        if sc.comm_on_compute_stream:
            out.append(_Kernel(name, COMPUTE_STREAM, t, t + m, comm=True))
            t += m
            comm_free = t
        else:
            s = max(t, comm_free)
            out.append(_Kernel(name, COMM_STREAM, s, s + m, comm=True))
            comm_free = s + m
    if sc.optimizer_ns:
        s = max(t, comm_free)
        out.append(_Kernel("void multi_tensor_apply_kernel<sgd>(float*)", COMPUTE_STREAM, s, s + sc.optimizer_ns))
    return out


def _explicit_step(sc: Scenario, rank: int, h: int) -> tuple[list[_Kernel], list[_Sync], int]:
    """One step with every launch modelled: a kernel starts at max(launch + latency, its stream free, its
    inputs ready). Returns the kernels, the syncs and the host span end. ``h`` is the span start."""
    slow = sc.slowdown(rank)
    free = {COMPUTE_STREAM: 0, COMM_STREAM: 0}
    kernels: list[_Kernel] = []
    syncs: list[_Sync] = []
    host = h + HOST_SLOT

    def run(name, stream, dur, launch, ready=0, **kw) -> _Kernel:
        start = max(launch + LAUNCH_LATENCY, free[stream], ready)
        k = _Kernel(name, stream, start, start + dur, launch=launch, **kw)
        free[stream] = k.end
        kernels.append(k)
        return k

    def launch_at(t: int) -> int:
        nonlocal host
        host = max(host, t)
        at, host = host, host + HOST_SLOT
        return at

    for i, d in enumerate(sc.forward_ns):
        run(f"void fwd_gemm_kernel_{i}<float>(float const*, float*)", COMPUTE_STREAM, int(d * slow), launch_at(0))
    comm_ends = []
    for i, (c, m) in enumerate(sc.buckets):
        b = run(f"void bwd_gemm_kernel_{i}<float>(float const*, float*)", COMPUTE_STREAM, int(c * slow),
                launch_at(0))
        if i == sc.item_after_bucket:
            copy = run("Memcpy DtoH (Device -> Pageable)", COMPUTE_STREAM, 2 * US, launch_at(0), memcpy=True)
            start = launch_at(0)
            end = max(start + 1 * US, copy.end + SYNC_RETURN)
            syncs.append(_Sync(copy, start, end))
            host = end + sc.item_idle_ns
        wgrad = f"void wgrad_gemm_kernel_{i}<float>(float const*, float*)"
        if sc.wgrad_ns and sc.launch_issue == "queued":
            at = launch_at(0)                                      # launched first ...
            w = run(wgrad, COMPUTE_STREAM, int(sc.wgrad_ns * slow), launch_at(0))
            comm_ends.append(run(_comm_name(sc), COMM_STREAM, m, at, ready=w.end, comm=True).end)  # ... starts after
        elif sc.wgrad_ns and sc.launch_issue == "late":
            w = run(wgrad, COMPUTE_STREAM, int(sc.wgrad_ns * slow), launch_at(0))
            comm_ends.append(run(_comm_name(sc), COMM_STREAM, m, launch_at(w.start + sc.late_ns), ready=b.end,
                                 comm=True).end)
        else:
            comm_ends.append(run(_comm_name(sc), COMM_STREAM, m, launch_at(0), ready=b.end, comm=True).end)
            if sc.wgrad_ns:
                run(wgrad, COMPUTE_STREAM, int(sc.wgrad_ns * slow), launch_at(0))
    if sc.optimizer_ns:
        run("void multi_tensor_apply_kernel<sgd>(float*)", COMPUTE_STREAM, sc.optimizer_ns, launch_at(0),
            ready=max(comm_ends, default=0))
    return kernels, syncs, host + HOST_SLOT


def _timeline(sc: Scenario, rank: int):
    """Yield (step, host span start, host span end, kernels, syncs) relative to the rank's clock zero.

    Every kernel carries its launch time. The classic scenarios launch everything before the GPU starts,
    in device order; the diagnosis scenarios model each launch (:func:`_explicit_step`); the pipelined
    ones launch a step while the GPU is still running earlier ones (:func:`_pipelined`).
    """
    if sc.gpu_lag_steps:
        for step, span_start, span_end, kernels in _pipelined(sc, rank):
            if step >= sc.first_step:
                yield step, span_start, span_end, kernels, []
        return
    t = 1 * MS
    for k in range(sc.steps):
        if sc.explicit:
            kernels, syncs, span_end = _explicit_step(sc, rank, t)
        else:
            n = len(sc.forward_ns) + 2 * len(sc.buckets) + (1 if sc.optimizer_ns else 0)
            lag = (n + 2) * HOST_SLOT            # the host launches everything before the GPU starts
            kernels, syncs, span_end = _step_kernels(sc, rank, t + lag), [], t + lag + HOST_SLOT
            for i, kr in enumerate(sorted(kernels, key=lambda kr: kr.start)):
                kr.launch = t + (i + 1) * HOST_SLOT
        yield sc.first_step + k, t, span_end, kernels, syncs
        t = max(kr.end for kr in kernels) + sc.step_gap_ns


def _pipelined(sc: Scenario, rank: int):
    """Every step of a job whose CPU runs ``gpu_lag_steps`` steps ahead of the GPU, the steps launched
    before the capture included (step numbers below ``first_step``, span None, launches -1).

    The GPU runs the steps back to back: step j's device work starts where step j-1's ends (its kernels
    were queued long before). The CPU begins step j when the GPU begins step j - lag (it is held back by
    the launch queue, a bounded prefetch, a sync on an older step's result) and spends one host slot per
    launch, so its ProfilerStep span ends long before its device work does.
    """
    assert not sc.explicit, "pipelined scenarios launch whole steps"
    lag = sc.gpu_lag_steps
    n = len(sc.forward_ns) + 2 * len(sc.buckets) + (1 if sc.optimizer_ns else 0)
    span = (n + 2) * HOST_SLOT
    gpu_start, kernels_of, t = [], [], 1 * MS
    for _ in range(lag + sc.steps):
        kernels = _step_kernels(sc, rank, t)
        gpu_start.append(t)
        kernels_of.append(kernels)
        t = max(k.end for k in kernels)
    for j, kernels in enumerate(kernels_of):
        step = sc.first_step - lag + j
        if j < lag:
            yield step, None, None, kernels
            continue
        s = gpu_start[j - lag]
        assert s + span <= gpu_start[j - lag + 1], "the host span must fit in one device step"
        for i, kr in enumerate(sorted(kernels, key=lambda kr: kr.start)):
            kr.launch = s + (i + 1) * HOST_SLOT
            assert kr.launch < kr.start
        yield step, s, s + span, kernels


def _pre_capture(sc: Scenario, rank: int) -> list[_Kernel]:
    """Device work launched before the capture began (its launches are not in the trace)."""
    if not sc.gpu_lag_steps:
        return []
    return [k for step, _, _, ks in _pipelined(sc, rank) if step < sc.first_step for k in ks]


def _pairwise(a: list[_Kernel], b: list[_Kernel]) -> int:
    return sum(max(0, min(x.end, y.end) - max(x.start, y.start)) for x in a for y in b)


def expected(sc: Scenario) -> dict[int, list[dict]]:
    """Per rank, per step: the exact metrics, by arithmetic on the timing model.

    Compute kernels (and copies) share one stream and comm kernels another, so within each group no two
    overlap: a group's busy time is the sum of durations and the overlap of two groups is the sum of their
    pairwise intersections — no interval algebra involved.
    """
    truth: dict[int, list[dict]] = {}
    for rank in range(sc.ranks):
        rows = []
        # The step window: from the later of the span start and the end of all device work launched
        # before the step (work launched before the capture included), to the later of the span end and
        # the end of the step's own work.
        before = max((k.end for k in _pre_capture(sc, rank)), default=0)
        for step, span_start, span_end, kernels, _ in _timeline(sc, rank):
            comp = [k for k in kernels if not k.comm and not k.memcpy]
            comm = [k for k in kernels if k.comm]
            copies = [k for k in kernels if k.memcpy]
            compute_ns = sum(k.end - k.start for k in comp)
            comm_ns = sum(k.end - k.start for k in comm)
            overlap = _pairwise(comm, comp)
            copy_ns = sum(k.end - k.start for k in copies)
            busy = compute_ns + comm_ns + copy_ns - overlap - _pairwise(copies, comm)
            start = max(span_start, before)
            end = max(span_end, max(k.end for k in kernels))
            # The sums above are the step's own kernels; the scenarios never let another step's work into
            # the window, nor this step's out of it.
            assert all(start <= k.start and k.end <= end for k in kernels)
            before = max(before, max(k.end for k in kernels))
            duration = end - start
            origin = _origin(sc, rank)
            rows.append(dict(step=step, start_ns=origin + start, end_ns=origin + end, duration_ns=duration,
                             compute_ns=compute_ns, comm_ns=comm_ns, overlap_ns=overlap,
                             exposed_comm_ns=comm_ns - overlap, idle_ns=duration - busy))
        truth[rank] = rows
    return truth


def pre_capture_truth(sc: Scenario) -> dict[int, dict | None]:
    """Per rank, the device work launched before the capture: kernel count, busy and comm time (by
    arithmetic: the steps run one after the other, comm kernels on one stream, compute on another),
    first start and last end; None without any."""
    out: dict[int, dict | None] = {}
    for rank in range(sc.ranks):
        ks = _pre_capture(sc, rank)
        if not ks:
            out[rank] = None
            continue
        comp = [k for k in ks if not k.comm]
        comm = [k for k in ks if k.comm]
        comm_ns = sum(k.end - k.start for k in comm)
        busy = sum(k.end - k.start for k in comp) + comm_ns - _pairwise(comm, comp)
        origin = _origin(sc, rank)
        out[rank] = dict(kernels=len(ks), busy_ns=busy, comm_ns=comm_ns,
                         start_ns=origin + min(k.start for k in ks), end_ns=origin + max(k.end for k in ks))
    return out


def sync_truth(sc: Scenario) -> dict[int, list[dict]]:
    """Per rank, per .item() sync: step, CPU blocked time, and device idle from the drain to the next kernel."""
    out: dict[int, list[dict]] = {}
    for rank in range(sc.ranks):
        rows = []
        for step, _, _, kernels, syncs in _timeline(sc, rank):
            for y in syncs:
                drained = max(k.end for k in kernels if k.start < y.end)
                nxt = min(k.start for k in kernels if k.start >= y.end)
                rows.append(dict(step=step, blocked_ns=y.end - y.start,
                                 idle_after_ns=nxt - drained if drained > y.start else 0,
                                 comm_in_flight_ns=_pairwise([k for k in kernels if k.comm],
                                                             [_Kernel("", 0, y.start, y.end)])))
        out[rank] = rows
    return out


def _origin(sc: Scenario, rank: int) -> int:
    """Epoch ns of the rank's clock zero (the base plus the rank's clock offset)."""
    return (BASE_NS if sc.era == "modern" else LEGACY_EPOCH_NS) + sc.offset(rank)


def _ts(sc: Scenario, abs_ns: int):
    """A time as the era writes it: relative 3-decimal float µs, or absolute integer µs."""
    if sc.era == "legacy":
        assert abs_ns % US == 0, "legacy traces have integer microseconds"
        return abs_ns // US
    return round((abs_ns - BASE_NS) / US, 3)


def _dur(sc: Scenario, ns: int):
    return ns // US if sc.era == "legacy" else round(ns / US, 3)


def trace_dict(sc: Scenario, rank: int) -> dict:
    """The Kineto document of one rank."""
    pid, tid = 4000 + rank, 4000 + rank
    origin = _origin(sc, rank)
    events: list[dict] = []
    corr = ext = 0

    def x(cat, name, start, dur, p=pid, t=tid, **args):
        events.append({"ph": "X", "cat": cat, "name": name, "pid": p, "tid": t, "ts": _ts(sc, origin + start),
                       "dur": _dur(sc, dur), "args": args})

    nelems = sc.bucket_bytes // 4
    coll_args = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                 "Group size": sc.ranks, "dtype": "Float", "Process Group Name": "0",
                 "Process Group Description": "default_pg"} if sc.era == "modern" else {}
    for k in _pre_capture(sc, rank):
        # Launched before the capture: the kernel with its (lower) correlation id, no launch, no CPU op.
        corr += 1
        x("kernel", k.name, k.start, k.end - k.start, p=rank, t=k.stream, device=rank, stream=k.stream,
          correlation=corr, **(coll_args if k.comm else {}))
    for step, span_start, span_end, kernels, syncs in _timeline(sc, rank):
        x("user_annotation", f"ProfilerStep#{step}", span_start, span_end - span_start)
        sync_of = {id(y.copy): y for y in syncs}
        for k in sorted(kernels, key=lambda k: k.launch):
            corr += 1
            ext += 1
            launch = k.launch
            kargs = {"device": rank, "stream": k.stream, "correlation": corr, "External id": ext}
            if k.memcpy:
                y = sync_of[id(k)]
                x("cpu_op", "aten::item", launch - 3 * US, y.end + 2 * US - (launch - 3 * US), **{"External id": ext})
                x("cpu_op", "aten::_local_scalar_dense", launch - 2 * US, y.end + 1 * US - (launch - 2 * US))
                x("cuda_runtime", "cudaMemcpyAsync", launch, 1 * US, correlation=corr, **{"External id": ext})
                x("gpu_memcpy", k.name, k.start, k.end - k.start, p=rank, t=k.stream, bytes=ITEM_BYTES, **kargs)
                corr += 1
                x("cuda_runtime", "cudaStreamSynchronize", y.start, y.end - y.start, correlation=corr)
                if sc.era == "modern":
                    x("cuda_sync", "Stream Sync", k.end, SYNC_RETURN, p=rank, t=k.stream, device=rank,
                      stream=k.stream, correlation=corr, cuda_sync_kind="Stream Sync")
                continue
            if k.comm:
                x("cpu_op", "c10d::allreduce_", launch - 4 * US, 9 * US, **{"External id": ext})
                rpc = {"External id": ext, **coll_args}
                kargs.update(coll_args)
                x("cpu_op", "record_param_comms", launch - 3 * US, 7 * US, **rpc)
                x("user_annotation", "nccl:all_reduce", launch - 2 * US, 5 * US,
                  **{"Input Dims": [[nelems]], "Input type": ["float"]})
            else:
                x("cpu_op", "aten::mm", launch - 2 * US, 5 * US, **{"External id": ext})
            x("cuda_runtime", "cudaLaunchKernel", launch, 1 * US, correlation=corr, **{"External id": ext})
            x("kernel", k.name, k.start, k.end - k.start, p=rank, t=k.stream, **kargs)
    meta = [{"ph": "M", "name": "thread_name", "pid": pid, "tid": tid, "args": {"name": f"thread {tid} (python)"}}]
    doc: dict = {"schemaVersion": 1,
                 "deviceProperties": [{"id": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(max(sc.ranks, 1))]}
    if sc.era == "modern":
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": sc.ranks, "pg_count": 1,
                                  "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl",
                                                 "pg_size": sc.ranks, "ranks": list(range(sc.ranks))}],
                                  "nccl_version": "2.27.5"}
        doc["displayTimeUnit"] = "ms"
        doc["baseTimeNanoseconds"] = BASE_NS
    else:
        doc["distributedInfo"] = {"backend": "nccl", "rank": rank, "world_size": sc.ranks}
    doc["traceEvents"] = meta + events
    doc["traceName"] = f"rank{rank}.json"
    return doc


def write(sc: Scenario, out_dir: str | Path, gz: bool = True) -> list[Path]:
    """Write rank<N>.json(.gz) for every rank plus ``metrics.expected`` (the truth, JSON) into out_dir.

    The truth file does not end in .json so that reporting on the folder reads only the traces.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(sc.ranks):
        data = json.dumps(trace_dict(sc, rank), separators=(",", ":")).encode()
        path = out / (f"rank{rank}.json.gz" if gz else f"rank{rank}.json")
        path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        paths.append(path)
    truth = {"scenario": sc.name, "ranks": {str(r): rows for r, rows in expected(sc).items()}}
    (out / EXPECTED_FILE).write_text(json.dumps(truth, indent=1) + "\n")
    return paths


# ------------------------------------------------------------------------------------ Nsight Systems

NSYS_SCHEMA = {  # real table and column names (shared reference nsys-sqlite.md, Appendix A)
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "CUPTI_ACTIVITY_KIND_KERNEL": "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                                  "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
                                  "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
                                  "gridX INTEGER NOT NULL, gridY INTEGER NOT NULL, gridZ INTEGER NOT NULL, "
                                  "blockX INTEGER NOT NULL, blockY INTEGER NOT NULL, blockZ INTEGER NOT NULL",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
                                   "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
                                   "returnValue INTEGER NOT NULL, callchainId INTEGER",
    "NVTX_EVENTS": "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
                   "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
                   "textId INTEGER, domainId INTEGER, uint64Value INTEGER, int64Value INTEGER, doubleValue REAL, "
                   "uint32Value INTEGER, int32Value INTEGER, floatValue REAL, jsonTextId INTEGER, jsonText TEXT",
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "TARGET_INFO_GPU": "vmId INTEGER NOT NULL, id INTEGER NOT NULL, name TEXT, busLocation TEXT, cuDevice INTEGER",
    "TARGET_INFO_SESSION_START_TIME": "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "META_DATA_CAPTURE": "name TEXT NOT NULL, value TEXT",
}
# Created only when a scenario has copies or syncs (exports without them lack the tables).
NSYS_OPTIONAL = {
    "CUPTI_ACTIVITY_KIND_MEMCPY": "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                                  "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
                                  "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL, "
                                  "srcKind INTEGER, dstKind INTEGER",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
                                           "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, "
                                           "eventId INTEGER NOT NULL, correlationId INTEGER, globalPid INTEGER, "
                                           "syncType INTEGER NOT NULL",
}
NO_EVENT = 0xFFFFFFFF
NVTX_PUSH_POP, NVTX_DOMAIN_CREATE = 59, 75
VM = 1 << 48                             # hardware 0, VM 1: the globalPid prefix of the Linux samples


def _short(kernel_name: str) -> str:
    """``void fwd_gemm_kernel_0<float>(float const*, float*)`` -> ``fwd_gemm_kernel_0`` (nsys shortName)."""
    base = kernel_name.split("(")[0].split("<")[0]
    return base.removeprefix("void ").strip()


def write_nsys(sc: Scenario, out_dir: str | Path, per_rank: bool = True) -> list[Path]:
    """The scenario as Nsight Systems SQLite exports: rank<N>.sqlite per rank, or one all_ranks.sqlite.

    Same kernels, launches and step spans as :func:`write`, so a report on either must agree to the ns.
    Times are stored relative to the capture start, whose epoch time is ``utcEpochNs`` (the Kineto
    origin of the file's first rank). One file holding every rank records each process's ``RANK`` in
    ``META_DATA_CAPTURE`` like a per-process launch would; per-rank files carry the rank in their name.
    """
    import sqlite3

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    groups = [[r] for r in range(sc.ranks)] if per_rank else [list(range(sc.ranks))]
    paths = []
    for ranks in groups:
        path = out / (f"rank{ranks[0]}.sqlite" if per_rank else "all_ranks.sqlite")
        path.unlink(missing_ok=True)
        con = sqlite3.connect(path)
        for table, cols in NSYS_SCHEMA.items():
            con.execute(f"CREATE TABLE {table} ({cols})")
        strings: dict[str, int] = {}

        def sid(text: str) -> int:
            if text not in strings:
                strings[text] = len(strings) + 1
                con.execute("INSERT INTO StringIds VALUES (?, ?)", (strings[text], text))
            return strings[text]

        session = _origin(sc, ranks[0])
        con.execute("INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (?, '', '')", (session,))
        con.executemany("INSERT INTO META_DATA_EXPORT VALUES (?, ?)", [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", "3.25.0"),
            ("EXPORT_PARAM_INCLUDE_BLOBS", "false")])
        con.execute("INSERT INTO NVTX_EVENTS (start, end, eventType, text, globalTid, domainId) "
                    "VALUES (0, NULL, ?, 'NCCL', ?, 1)", (NVTX_DOMAIN_CREATE, VM | (4000 + ranks[0]) << 24))
        for n, rank in enumerate(ranks):
            pid = 4000 + rank
            gpid = VM | (pid << 24)
            gtid = gpid | pid                # the main thread: tid == pid
            shift = _origin(sc, rank) - session
            con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, pid))
            con.execute("INSERT INTO ThreadNames VALUES (?, 50, ?)", (sid("python3"), gtid))
            con.execute("INSERT INTO TARGET_INFO_GPU VALUES (1, ?, 'NVIDIA H100 80GB HBM3', '', ?)", (rank, rank))
            env = dict(sc.env, **({} if per_rank else {"RANK": str(rank), "WORLD_SIZE": str(sc.ranks)}))
            if env:
                con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [(f"PROCESS_{n}:PID", str(pid))] + [
                    (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", f'{k}="{v}"') for k, v in env.items()])
            corr = op_id = 0
            kernels, runtime, ranges, copies, waits = [], [], [], [], []
            for k in _pre_capture(sc, rank):      # launched before the capture: no runtime row, no range
                corr += 1
                kernels.append((shift + k.start, shift + k.end, rank, 1, k.stream, corr, gpid, sid(k.name),
                                sid(_short(k.name)), 1, 1, 1, 128, 1, 1))
            for step, span_start, span_end, ks, syncs in _timeline(sc, rank):
                ranges.append((shift + span_start, shift + span_end, f"ProfilerStep#{step}", None, 0))
                sync_of = {id(y.copy): y for y in syncs}
                for k in sorted(ks, key=lambda k: k.launch):
                    corr += 1
                    op_id += 1
                    launch = shift + k.launch
                    if k.memcpy:
                        y = sync_of[id(k)]
                        end = shift + y.end
                        ranges.append((launch - 3 * US, end + 2 * US, f"aten::item, seq = {op_id}, op_id = {op_id}",
                                       None, 0))
                        ranges.append((launch - 2 * US, end + 1 * US, f"aten::_local_scalar_dense, op_id = {op_id}",
                                       None, 0))
                        runtime.append((launch, launch + 1 * US, 0, gtid, corr, sid("cudaMemcpyAsync_v3020"), 0, 0))
                        copies.append((shift + k.start, shift + k.end, rank, 1, k.stream, corr, gpid, ITEM_BYTES,
                                       2, 2, 0))           # DtoH, Device -> Pageable
                        corr += 1
                        runtime.append((shift + y.start, end, 0, gtid, corr, sid("cudaStreamSynchronize_v3020"), 0, 0))
                        waits.append((shift + k.end, shift + k.end + SYNC_RETURN, rank, 1, k.stream, NO_EVENT, corr,
                                      gpid, 3))
                        continue
                    if k.comm:
                        # torch's range (a registered string), then NCCL's own API range in its domain.
                        ranges.append((launch - 3 * US, launch + 4 * US, None, sid(f"nccl:all_reduce, op_id = {op_id}"), 0))
                        ranges.append((launch - 2 * US, launch + 3 * US, "ncclAllReduce", None, 1))
                    else:
                        ranges.append((launch - 2 * US, launch + 3 * US, f"aten::mm, seq = {op_id}, op_id = {op_id}", None, 0))
                    runtime.append((launch, launch + 1 * US, 0, gtid, corr, sid("cudaLaunchKernel_v7000"), 0, 0))
                    kernels.append((shift + k.start, shift + k.end, rank, 1, k.stream, corr, gpid, sid(k.name),
                                    sid(_short(k.name)), 1, 1, 1, 128, 1, 1))
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES ({','.join('?' * 15)})", kernels)
            if copies or waits:
                for table in ("CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION"):
                    con.execute(f"CREATE TABLE IF NOT EXISTS {table} ({NSYS_OPTIONAL[table]})")
                con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY VALUES ({','.join('?' * 11)})", copies)
                con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_SYNCHRONIZATION VALUES ({','.join('?' * 9)})", waits)
            con.executemany(f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME VALUES ({','.join('?' * 8)})", runtime)
            con.executemany("INSERT INTO NVTX_EVENTS (start, end, eventType, text, textId, globalTid, domainId) "
                            "VALUES (?, ?, 59, ?, ?, ?, ?)",
                            [(s, e, text, tid_, gtid, dom) for s, e, text, tid_, dom in ranges])
        con.commit()
        con.close()
        paths.append(path)
    truth = {"scenario": sc.name, "ranks": {str(r): rows for r, rows in expected(sc).items()}}
    (out / EXPECTED_FILE).write_text(json.dumps(truth, indent=1) + "\n")
    return paths


def main(argv: list[str]) -> int:
    fmt = "kineto"
    if argv[:1] == ["--nsys"]:
        fmt, argv = "nsys", argv[1:]
    if len(argv) != 2 or argv[0] not in SCENARIOS:
        print(f"usage: python -m tracelens.synth [--nsys] {{{','.join(SCENARIOS)}}} OUT_DIR", file=sys.stderr)
        return 2
    paths = write_nsys(SCENARIOS[argv[0]], argv[1]) if fmt == "nsys" else write(SCENARIOS[argv[0]], argv[1])
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
