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
}


@dataclass
class _Kernel:
    name: str
    stream: int
    start: int
    end: int
    comm: bool = False


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
        name = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
        if sc.era == "legacy":
            name = "ncclKernel_AllReduce_RING_LL_Sum_float(ncclWorkElem)"
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


def _timeline(sc: Scenario, rank: int):
    """Yield (step, host span start, host span end, kernels) with times relative to the rank's clock zero."""
    t = 1 * MS
    for k in range(sc.steps):
        n = len(sc.forward_ns) + 2 * len(sc.buckets) + (1 if sc.optimizer_ns else 0)
        lag = (n + 2) * HOST_SLOT            # the host launches everything before the GPU starts
        kernels = _step_kernels(sc, rank, t + lag)
        yield sc.first_step + k, t, t + lag + HOST_SLOT, kernels
        t = max(kr.end for kr in kernels) + sc.step_gap_ns


def expected(sc: Scenario) -> dict[int, list[dict]]:
    """Per rank, per step: the exact metrics, by arithmetic on the timing model.

    Compute kernels are back to back on one stream, so compute is the sum of their durations and the
    overlap of a comm kernel is its intersection with [first compute start, last backward end) plus its
    intersection with the optimizer kernel (zero: the optimizer waits for all comm).
    """
    truth: dict[int, list[dict]] = {}
    for rank in range(sc.ranks):
        rows = []
        for step, span_start, span_end, kernels in _timeline(sc, rank):
            comp = [k for k in kernels if not k.comm]
            comm = [k for k in kernels if k.comm]
            compute_ns = sum(k.end - k.start for k in comp)
            comm_ns = sum(k.end - k.start for k in comm)
            bwd_end = max(k.end for k in comp if "bwd" in k.name)
            c0 = min(k.start for k in comp)
            opt = [k for k in comp if "multi_tensor" in k.name]
            overlap = 0
            for k in comm:
                overlap += max(0, min(k.end, bwd_end) - max(k.start, c0))
                for o in opt:
                    overlap += max(0, min(k.end, o.end) - max(k.start, o.start))
            if sc.comm_on_compute_stream:
                overlap = 0
            end = max(span_end, max(k.end for k in kernels))
            duration = end - span_start
            origin = _origin(sc, rank)
            rows.append(dict(step=step, start_ns=origin + span_start, end_ns=origin + end, duration_ns=duration,
                             compute_ns=compute_ns, comm_ns=comm_ns, overlap_ns=overlap,
                             exposed_comm_ns=comm_ns - overlap,
                             idle_ns=duration - (compute_ns + comm_ns - overlap)))
        truth[rank] = rows
    return truth


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
    for step, span_start, span_end, kernels in _timeline(sc, rank):
        x("user_annotation", f"ProfilerStep#{step}", span_start, span_end - span_start)
        for i, k in enumerate(sorted(kernels, key=lambda k: k.start)):
            corr += 1
            ext += 1
            launch = span_start + (i + 1) * HOST_SLOT
            kargs = {"device": rank, "stream": k.stream, "correlation": corr, "External id": ext}
            if k.comm:
                x("cpu_op", "c10d::allreduce_", launch - 4 * US, 9 * US, **{"External id": ext})
                rpc = {"External id": ext}
                if sc.era == "modern":
                    rpc.update({"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                                "Group size": sc.ranks, "dtype": "Float", "Process Group Name": "0",
                                "Process Group Description": "default_pg"})
                    kargs.update({k2: v for k2, v in rpc.items() if k2 != "External id"})
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
            if not per_rank:
                con.executemany("INSERT INTO META_DATA_CAPTURE VALUES (?, ?)", [
                    (f"PROCESS_{n}:PID", str(pid)), (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", f'RANK="{rank}"'),
                    (f"PROCESS_{n}:ENVIRONMENT_VARIABLE", f'WORLD_SIZE="{sc.ranks}"')])
            corr = op_id = 0
            kernels, runtime, ranges = [], [], []
            for step, span_start, span_end, ks in _timeline(sc, rank):
                ranges.append((shift + span_start, shift + span_end, f"ProfilerStep#{step}", None, 0))
                for i, k in enumerate(sorted(ks, key=lambda k: k.start)):
                    corr += 1
                    op_id += 1
                    launch = shift + span_start + (i + 1) * HOST_SLOT
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
