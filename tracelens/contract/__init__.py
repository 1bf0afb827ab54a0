"""The Report: the versioned JSON contract (schema ``tracelens.report/1``) every renderer, the gate and the
dashboard read. Keys may be added in later versions; existing keys never change meaning.

Ratios are ``None`` (JSON null) when undefined (no communication, zero-length window) — never NaN.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import msgspec

from ._version import __version__
from .errors import InputError, printable

SCHEMA = "tracelens.report/1"
_FAMILY = SCHEMA.split("/")[0]


class PatternEvidence(msgspec.Struct, kw_only=True):
    """The features the overlap-pattern rule decided on (docs/metrics.md, "Overlap pattern")."""

    comm_kernels: int                      # comm activities (GPU) or gloo collectives (CPU) starting in the step
    bursts: int                            # runs of communication separated by compute
    started_during_compute: int            # comm activities starting before the compute phase ended
    compute_start_ns: Optional[int]        # first compute in the step (absolute ns)
    compute_phase_end_ns: Optional[int]    # where the step's final stretch of exposed communication begins
    first_comm_ns: Optional[int]           # start of the first comm activity (absolute ns)
    first_comm_offset: Optional[float]     # (first comm - compute start) / (compute phase length)
    tail_ns: int                           # comm time at or after the compute phase end
    tail_fraction: Optional[float]         # tail_ns / comm_ns
    op: Optional[str] = None               # the most frequent collective of the step
    comm_on_compute_stream: Optional[float] = None  # share of comm activity time on a stream that also ran
                                                    # compute in the step (GPU only; null without comm)
    ops: Optional[dict[str, int]] = None   # the step's collectives per operation, most first
    tail_collectives: Optional[int] = None  # collectives starting at or after the compute phase end
    issued_during_compute: Optional[int] = None  # ... of which the host issued before compute it issued later
    queued: Optional[int] = None           # ... of which started late, released by an earlier collective's end
    backlog_ns: Optional[int] = None       # tail time of collectives issued during compute (comm backlog)


class DimensionStep(msgspec.Struct, kw_only=True):
    """One parallelism dimension's communication in one step (docs/metrics.md, "Parallelism dimensions")."""

    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    overlap_pct: Optional[float]


class GroupRule(msgspec.Struct, kw_only=True):
    """How the collectives of one process group were attributed to a dimension."""

    pg: Optional[str]                      # process group name
    desc: Optional[str]                    # its description (pg_desc / Process Group Description)
    size: Optional[int]
    dimension: str                         # dp | fsdp | tp | pp | ep | emb | cp | unknown
    rule: str                              # name | scope (host ops around it: TorchRec embeddings, MoE) |
                                           # kernel (DeepEP) | op | layout-world | layout-contiguous |
                                           # layout-strided | only-group | none | no-metadata (comm without a
                                           # collective record)
    ops: list[str]
    collectives: int


class DimensionTotals(msgspec.Struct, kw_only=True):
    """One parallelism dimension's communication summed over the rank's steps, and the groups behind it."""

    dimension: str
    collectives: int                       # communication activities attributed to it (pre-capture included)
    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    overlap_pct: Optional[float]
    groups: list[GroupRule]


class StepMetrics(msgspec.Struct, kw_only=True):
    step: Optional[int]
    start_ns: int
    end_ns: int
    duration_ns: int
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    idle_ns: int
    copy_ns: int = 0                       # memcpy + memset device time in the step (0 in older reports)
    overlap_pct: Optional[float]
    exposed_comm_fraction: Optional[float]
    complete: bool = True
    memcpy_ns: int = 0                     # copy_ns split: memory copies (that are not communication) ...
    memset_ns: int = 0                     # ... and memory sets; copy_ns is their union
    pattern: Optional[str] = None          # sawtooth | two-phase | backlog | serialized | partial | no-comm; null: comm
                                           # but no compute (nothing to overlap), or comm not measurable
    pattern_evidence: Optional[PatternEvidence] = None
    # Across ranks (null for a single rank, and for steps without matched collectives): sums over the step's
    # collectives matched on other ranks, on the rank's own clock (docs/metrics.md, "Across ranks").
    # Wall-clock time: the union over the step's matched collectives of their wait (start to end - T) where
    # none of the rank's collectives transferred, and of their transfers (the last T of each), so wait +
    # transfer <= comm_ns even where the rank's collectives overlap in time.
    wait_ns: Optional[int] = None          # time spent waiting for the other ranks
    transfer_ns: Optional[int] = None      # time moving data (each instance's T: the shortest member duration)
    exposed_wait_ns: Optional[int] = None  # exposed time spent waiting for the last rank (the run verdict's
                                           # peer-wait): exposed communication inside the wait, as wall time
    # The overlap tax (docs/metrics.md, "Overlap tax"): compute slowed by the communication beside it.
    overlap_tax_ns: int = 0                # sum of compared kernels' excess over their baseline
    effective_exposed_ns: int = 0          # exposed_comm_ns + overlap_tax_ns
    overlap_tax_compared: int = 0          # kernels overlapped by communication and compared with a baseline
    overlap_tax_uncompared: int = 0        # ... and those without enough runs alone to compare
    # The tax's interval (docs/metrics.md, "Overlap tax"): overlap_tax_low_ns <= overlap_tax_ns <=
    # overlap_tax_high_ns at the tax_confidence threshold; rank causes by the low end (the part the trace
    # proves). 0 in older reports.
    overlap_tax_low_ns: int = 0
    overlap_tax_high_ns: int = 0
    overlap_tax_varying: int = 0           # kernels under communication not compared: their work varies
    # Per parallelism dimension (null when the rank's communication is of one dimension: the step's own
    # numbers are that dimension's, named in the rank's ``dimensions``).
    by_dimension: Optional[dict[str, DimensionStep]] = None
    # The step time with communication perfectly hidden: max(duration - (exposed - exposed wait) - overlap tax,
    # compute); the exposed wait for other ranks (0 for a single rank) is not overlap's to hide.
    perfect_overlap_step_ns: Optional[int] = None


class Totals(msgspec.Struct, kw_only=True):
    duration_ns: int
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    idle_ns: int
    copy_ns: int = 0
    overlap_pct: Optional[float]
    exposed_comm_fraction: Optional[float]
    memcpy_ns: int = 0
    memset_ns: int = 0
    overlap_tax_ns: int = 0                # sums over the steps, as in StepMetrics
    effective_exposed_ns: int = 0
    overlap_tax_compared: int = 0
    overlap_tax_uncompared: int = 0
    perfect_overlap_step_ns: Optional[int] = None   # sum of the steps' (null in older reports)
    overlap_tax_low_ns: int = 0            # sums over the steps, as in StepMetrics
    overlap_tax_high_ns: int = 0
    overlap_tax_varying: int = 0


class PreCapture(msgspec.Struct, kw_only=True):
    """Device work launched before the capture began (its launch is not in the trace): earlier steps'
    work still running when recording started. It belongs to no step; reported once per rank."""

    kernels: int                           # compute and communication kernels
    copies: int                            # memory copies and sets
    busy_ns: int                           # length of the union of all of it
    comm_ns: int                           # length of the union of its communication
    copy_ns: int                           # length of the union of its copies and sets
    start_ns: int                          # first start
    end_ns: int                            # last end: no step's window begins before it


class BucketPrediction(msgspec.Struct, kw_only=True):
    """The bucket model's exposed communication per step for one bucket cap (null: equal buckets)."""

    cap_mib: Optional[int]
    buckets: int
    exposed_ns: int


class BucketModel(msgspec.Struct, kw_only=True):
    """The WFBP bucket model fitted to a rank's data-parallel all-reduces (docs/metrics.md, "Bucket model")."""

    step: int                              # the step it was fitted on (the median backward)
    buckets: int
    gradient_bytes: Optional[int]          # null: bucket sizes not in the trace
    first_bucket_bytes: Optional[int]
    backward_ns: int                       # Tb, the backward's compute time
    latency_ns: Optional[int]              # alpha of t(s) = alpha + s / B; null: not separable
    bucket_ns: Optional[int]               # without sizes: the median bucket's all-reduce time
    gbps: Optional[float]                  # B, GB/s
    observed_exposed_ns: int               # median over the steps of the dp exposed communication
    model_exposed_ns: int                  # the model at the observed buckets
    predictions: list[BucketPrediction]
    suggested_cap_mib: Optional[int]       # the cap with the least predicted exposure (null without a fit)
    suggested_exposed_ns: Optional[int]


class SettingCheck(msgspec.Struct, kw_only=True):
    """A recorded setting beside what the trace shows (docs/metrics.md, "Configured and observed")."""

    name: str                              # bucket_cap_mb | CUDA_DEVICE_MAX_CONNECTIONS | NCCL_ALGO | NCCL_PROTO
    source: str                            # environment | command line
    configured: str
    observed: str
    contradiction: Optional[str]           # null when the trace agrees (or cannot say)


class RankResult(msgspec.Struct, kw_only=True):
    rank: int
    world_size: Optional[int]
    device: Optional[int]
    device_name: Optional[str]
    mode: str                  # "gpu" | "cpu"
    source: str
    steps: list[StepMetrics]
    totals: Totals
    pattern: Optional[str] = None          # the strict majority of the steps' patterns, else "mixed"
    pattern_counts: dict[str, int] = msgspec.field(default_factory=dict)   # steps per pattern
    pre_capture: Optional[PreCapture] = None   # on the rank's main device; None when there was none
    dimensions: list[DimensionTotals] = msgspec.field(default_factory=list)  # per parallelism dimension
    bucket_model: Optional[BucketModel] = None  # DDP-style runs with at least two buckets per step
    settings: list[SettingCheck] = msgspec.field(default_factory=list)   # configured beside observed


class DimensionRun(msgspec.Struct, kw_only=True):
    """One parallelism dimension over every rank: sums of the ranks' ``dimensions``."""

    dimension: str
    ranks: int                             # ranks with communication of this dimension
    comm_ns: int
    exposed_comm_ns: int
    overlap_pct: Optional[float]
    worst_rank: int                        # the rank with the most exposed time of it (lowest on a tie)
    worst_exposed_ns: int
    rules: list[str]                       # the rules that attributed it, each once (name, op, layout-world, ...)


class Summary(msgspec.Struct, kw_only=True):
    ranks: int
    steps: int
    overlap_pct: Optional[float]
    exposed_comm_fraction: Optional[float]
    worst_rank: Optional[int]              # the most exposed rank: the most exposed communication time (lowest
                                           # on a tie; null without communication)
    comm_ns: int = 0
    exposed_comm_ns: int = 0
    pattern: Optional[str] = None          # the strict majority of the ranks' patterns, else "mixed"
    pattern_counts: dict[str, int] = msgspec.field(default_factory=dict)   # ranks per pattern
    # What perfect overlap would buy: 1 - sum(perfect_overlap_step_ns) / sum(duration_ns) over every rank's
    # steps (null without steps). Overlap hides transfers, not the wait for a late rank: with ranks matched,
    # each step's exposed wait stays in its perfect_overlap_step_ns (arrival_gain counts it).
    perfect_overlap_gain: Optional[float] = None
    dimensions: list[DimensionRun] = msgspec.field(default_factory=list)   # most exposed first
    # The ranks' overlap tax summed (compute lost to communication beside it), the kernels it compared, and
    # exposed comm plus that tax: what communication really costs the run.
    overlap_tax_ns: int = 0
    overlap_tax_compared: int = 0
    effective_exposed_ns: int = 0
    overlap_tax_low_ns: int = 0            # the ranks' tax intervals summed (0 in older reports)
    overlap_tax_high_ns: int = 0
    # What the ranks arriving together at their collectives would buy: the exposed wait for the last rank
    # (steps[*].exposed_wait_ns) over every rank's step time (null for a single rank or nothing matched).
    arrival_gain: Optional[float] = None


class Collective(msgspec.Struct, kw_only=True):
    rank: int
    step: Optional[int]
    name: str
    op: Optional[str]
    bytes: Optional[int]
    start_ns: int
    duration_ns: int
    exposed_ns: int
    pg: Optional[str] = None               # process group name
    seq: Optional[int] = None              # the collective's sequence number in its process group
    group_size: Optional[int] = None
    dtype: Optional[str] = None


class RankAcross(msgspec.Struct, kw_only=True):
    """One rank's share of the cross-rank analysis: totals over its matched collectives."""

    rank: int
    host: Optional[str]
    clock_offset_ns: Optional[int]         # its clock minus the reference rank's; null: could not be estimated
    clock_spread_ns: Optional[int]         # p90 - p10 of the end-time differences the offset is the median of
    clock_corrected: bool                  # whether cross-rank times used the offset
    matched: int                           # its collectives matched on other ranks
    wait_ns: int                           # wall-clock time, as StepMetrics.wait_ns, over the whole capture
    transfer_ns: int
    exposed_wait_ns: int
    late_count: int                        # matched collectives it arrived at last


class MatchedCollective(msgspec.Struct, kw_only=True):
    """One collective instance matched across its ranks."""

    pg: Optional[str]                      # process group; null when matched by stream order
    seq: Optional[int]                     # its seq, or its order index within the group (or stream) and step
    step: Optional[int]                    # the step of the lowest member rank
    op: Optional[str]
    bytes: Optional[int]
    group_size: int                        # the group size the trace records, else the ranks matched
    ranks: list[int]
    last_rank: Optional[int]               # the rank that started last; null without a single last one or when
                                           # a member's clock could not be aligned
    arrival_skew_ns: Optional[int]         # latest start - earliest start (aligned clocks)
    transfer_ns: int                       # shortest member duration
    wait_ns: int                           # the members' waits summed
    algbw_gbps: Optional[float]            # bytes / transfer_ns (GB/s = 1e9 B/s)
    busbw_gbps: Optional[float]            # algbw x the nccl-tests factor of the op and group size
    starts_ns: Optional[list[int]] = None  # per member (aligned to ``ranks``): its start on the reference rank's
    ends_ns: Optional[list[int]] = None    # clock where its offset was applied, else on its own clock


class BandwidthRow(msgspec.Struct, kw_only=True):
    """Bus bandwidth of one (op, message-size bucket, group size)."""

    op: Optional[str]
    group_size: int
    min_bytes: int                         # the bucket: min_bytes <= bytes < max_bytes (null: no upper bound)
    max_bytes: Optional[int]
    count: int
    latency_bound: bool                    # below bandwidth_min_bytes: left out of bandwidth verdicts
    algbw_p50_gbps: Optional[float]
    busbw_p10_gbps: Optional[float]
    busbw_p50_gbps: Optional[float]
    busbw_p90_gbps: Optional[float]


class Matching(msgspec.Struct, kw_only=True):
    key: Optional[str]                     # pg-seq | pg-order | stream-order: the weakest key any match used
    matched: int                           # collective instances matched across ranks
    unmatched: int                         # rank-local collectives left unmatched
    missing_ranks: list[int]               # ranks of the world or of a process group whose trace was not given


class CrossRank(msgspec.Struct, kw_only=True):
    reference_rank: int                    # clock offsets are against this rank's clock
    ranks: list[RankAcross]
    collectives: list[MatchedCollective]
    bandwidth: list[BandwidthRow]
    matching: Matching


class Diagnosis(msgspec.Struct, kw_only=True):
    """One finding for one rank and step: a verdict, why it was given, and what to try."""

    id: str                                # overlap-pattern | sync-stall | launch-order | memcpy-bound |
                                           # straggler | no-gpu-activity | clock-offset | nccl-transport |
                                           # overlap-tax | hidden-comm | parallelism | bucket-size |
                                           # config-mismatch
    severity: str                          # info | warning | critical
    rank: int                              # nccl-transport: the lowest rank its evidence names, -1: none
    step: Optional[int]
    title: str                             # the verdict in one line
    detail: str                            # the evidence in one sentence
    advice: str = ""                       # what to try
    evidence: dict = msgspec.field(default_factory=dict)


SEVERITIES = ("info", "warning", "critical")
MIXED = "mixed"            # the pattern of a rank (run) whose steps (ranks) have no pattern with a strict majority


class InputFile(msgspec.Struct, kw_only=True):
    path: str
    format: str
    rank: int
    bytes: int
    rank_rule: str = "distributedInfo"


class WarningEntry(msgspec.Struct, kw_only=True):
    code: str
    rank: Optional[int]
    count: int
    message: str


class EvidenceLine(msgspec.Struct, kw_only=True):
    """A line a transport verdict rests on: a log line (file, 1-based line) or a recorded setting (line null)."""

    file: str
    line: Optional[int]
    text: str


class Communicator(msgspec.Struct, kw_only=True):
    """One NCCL communicator as its log lines describe it (``id``: the commId NCCL prints, else the comm
    pointer with its host:pid, else ``all`` for logs without communicator lines)."""

    id: str
    ranks: list[int]
    hosts: list[str]
    n_nodes: Optional[int] = msgspec.field(name="nNodes")
    net: Optional[str]                     # Using network / the NET/<name> of its connections
    plugin: Optional[str]                  # the NET plugin assigned or loaded, when the log says
    devices: list[str]                     # RDMA devices (mlx5_0) or socket interfaces (eth0) listed
    gdr: Optional[bool]                    # every network connection with GPUDirect RDMA; null: none seen
    connections: dict[str, int]            # connection lines per transport (NET/IB, P2P/IPC, SHM, ...)
    verdict: str


class BandwidthCheck(msgspec.Struct, kw_only=True):
    """Inter-node bus bandwidth of large collectives against the TCP and RDMA ranges (docs/metrics.md)."""

    source: str                            # comm-table (per-rank durations) | cross-rank (transfer times)
    collectives: int                       # collectives measured
    busbw_gbps_p10: float
    busbw_gbps_p50: float
    busbw_gbps_p90: float
    range: str                             # tcp | ambiguous | rdma
    tcp_max_gbps: float
    rdma_min_gbps: float


class Transport(msgspec.Struct, kw_only=True):
    """Which network transport NCCL used, and whether TCP was deliberate (docs/metrics.md, "Network
    transport")."""

    verdict: str                           # intra_node_only | rdma_gdr | rdma_host_staged | rdma_init_only |
                                           # tcp_deliberate | tcp_silent_fallback | tcp_no_rdma |
                                           # inconclusive | unknown
    severity: str
    multi_node: Optional[bool]
    nccl_version: Optional[str]
    communicators: list[Communicator] = msgspec.field(default_factory=list)
    env: dict[str, str] = msgspec.field(default_factory=dict)   # the NCCL variables found (logs, manifest, nsys)
    evidence: list[EvidenceLine] = msgspec.field(default_factory=list)
    bandwidth: Optional[BandwidthCheck] = None
    logs: int = 0                          # NCCL logs read


class Culprit(msgspec.Struct, kw_only=True):
    """The rank the others wait for, and why it arrives late (docs/metrics.md, "The culprit's reason")."""

    rank: int
    reason: str                            # compute | host-gap | sync-stall | late-launch | unknown


class Cause(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One cause of exposed communication in the run verdict (docs/metrics.md, "The run verdict")."""

    cause: str                             # peer-wait | not-overlapped | overlap-tax
    ns_per_step: int                       # the median over ranks of the rank's mean per step
    share_of_step: Optional[float]         # ns_per_step / the median over ranks of the mean step time
    ranks: list[int]                       # the ranks where the cause is material
    culprit: Optional[Culprit]             # peer-wait: the rank the others wait for (null: none, other causes)
    lever: str                             # the one thing to try first
    pattern: Optional[str] = None          # not-overlapped: the overlap pattern of the steps it is material in


class Verdict(msgspec.Struct, kw_only=True):
    """The run's answer: its biggest cause of exposed communication first (docs/metrics.md, "The run verdict")."""

    headline: str
    causes: list[Cause]                    # most costly first


class Tool(msgspec.Struct, kw_only=True):
    name: str = "tracelens"
    version: str = __version__


class Report(msgspec.Struct, kw_only=True):
    schema: str = SCHEMA
    tool: Tool = msgspec.field(default_factory=Tool)
    inputs: list[InputFile]
    ranks: list[RankResult]
    summary: Summary
    collectives: list[Collective]
    diagnoses: list[Diagnosis] = msgspec.field(default_factory=list)
    warnings: list[WarningEntry] = msgspec.field(default_factory=list)
    transport: Optional[Transport] = None  # null without NCCL logs and without inter-node bandwidth
    cross_rank: Optional[CrossRank] = None  # null for a single rank
    verdict: Optional[Verdict] = None      # null only in reports written before it existed

    def to_json(self, indent: int = 2) -> bytes:
        try:
            raw = msgspec.json.encode(self)
        except UnicodeEncodeError:
            # A file name that is not UTF-8 (lone surrogates in Python): written escaped, as printed everywhere.
            raw = msgspec.json.encode(_printable(msgspec.to_builtins(self)))
        return msgspec.json.format(raw, indent=indent) if indent else raw

    @classmethod
    def from_json(cls, data: bytes | str) -> "Report":
        """Read a saved report back (unknown keys from newer versions are ignored)."""
        return msgspec.json.decode(data, type=cls)


def _printable(obj):
    """Every string of a JSON-ready value through :func:`.errors.printable`."""
    if isinstance(obj, str):
        return printable(obj)
    if isinstance(obj, dict):
        return {printable(k) if isinstance(k, str) else k: _printable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_printable(v) for v in obj]
    return obj


def ratio(num: int, den: int, scale: float = 1.0) -> Optional[float]:
    """num/den (times scale), or None when den is 0 — the report never holds NaN."""
    return None if den <= 0 else scale * num / den


def is_report_file(path) -> bool:
    """Whether ``path`` is a saved report (``tracelens report --format json``) rather than a trace."""
    p = Path(path)
    if not p.is_file() or not p.name.lower().endswith(".json"):
        return False
    with open(p, "rb") as fh:
        head = fh.read(256)
    return b'"schema"' in head and _FAMILY.encode() in head


def read_report(path) -> Report:
    """A saved report, or InputError (exit 3) naming the file and what is wrong with it."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputError(f"cannot read report: {exc.strerror or exc}", path=str(path)) from None
    try:
        doc = msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        raise InputError(f"not a JSON report: {exc}", path=str(path)) from None
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if not isinstance(schema, str) or not schema.startswith(_FAMILY + "/"):
        raise InputError(f"not a tracelens report (schema {schema!r})", path=str(path))
    if schema != SCHEMA:
        raise InputError(f"report schema {schema} is not the {SCHEMA} this version reads", path=str(path))
    try:
        return msgspec.convert(doc, Report)
    except msgspec.ValidationError as exc:
        raise InputError(f"malformed report: {exc}", path=str(path)) from None
