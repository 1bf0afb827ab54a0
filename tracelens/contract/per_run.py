"""The run's part of the Report: the summary over ranks, the collectives, the matched collectives across
ranks, the diagnoses, the inputs and warnings, the network transport and the run verdict."""

from __future__ import annotations

from typing import Optional

import msgspec


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


class WorkTime(msgspec.Struct, kw_only=True):
    """One name's share of the run's steps (docs/metrics.md, "Comparing two runs"): a kernel, copy or
    collective of a GPU rank, a CPU op (by self time) of a CPU rank."""

    name: str
    kind: str                              # compute | comm | memcpy | memset | sync | cpu-op
    ranks: int                             # the ranks among whose top names it is
    count_per_step: float                  # the mean over every rank (0 where it is not among its top names)
    ns_per_step: int


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
    # The run's work by name, most time first (at most WORK_TOP): what `tracelens diff` matches between runs.
    work: list[WorkTime] = msgspec.field(default_factory=list)


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
    exposed_wait_ns: Optional[int]         # null: not measurable (a rank known from NCCL Inspector logs alone:
                                           # the logs hold no compute, so what of the wait was exposed is unknown)
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
    # The sizes seen in the bucket, its smallest and largest collective (null in reports written before them).
    smallest_bytes: Optional[int] = None
    largest_bytes: Optional[int] = None
    count: int
    latency_bound: bool                    # below bandwidth_min_bytes: left out of bandwidth verdicts
    algbw_p50_gbps: Optional[float]
    busbw_p10_gbps: Optional[float]
    busbw_p50_gbps: Optional[float]
    busbw_p90_gbps: Optional[float]


class InspectorPair(msgspec.Struct, kw_only=True):
    """A process group of the traces paired with the NCCL Inspector communicator serving it, learned on the
    ranks that have both (analyzers/run/log_pairing.py)."""

    pg: str                                # the traces' process group
    comm: str                              # the Inspector communicator (header.id)
    sn_offset: int                         # coll_sn - Seq
    agreed: int                            # traced collectives of the group that lined up with the logs'
    of: int                                # traced collectives of the group, over the traced ranks


class InspectorRanks(msgspec.Struct, kw_only=True):
    """The ranks known from NCCL Inspector logs alone (docs/metrics.md, "From NCCL Inspector logs"): their
    collectives are in ``cross_rank`` (matched by communicator and ``coll_sn``, with waits, the late rank and
    bandwidth), but they are not in ``ranks``, since the logs hold no compute and no steps. What needs compute
    is unknown, never 0: ``overlap_pct`` and ``exposed_comm_ns`` are always null here. Beside traces of some
    ranks, ``traced`` lists the ranks whose collectives came from their traces (their logs taught ``paired``)."""

    ranks: list[int]
    files: int                             # Inspector files read
    records: int                           # collective records read
    timed: int                             # ... with kernel timestamps (verbose output): the matched rows
                                           # (with ``exec_times``: the kernel_gpu records matched instead)
    exec_times: bool = False               # no record had timestamps: waits and the last rank from exec times
    overlap_pct: Optional[float] = None    # unknown from the logs
    exposed_comm_ns: Optional[int] = None  # unknown from the logs
    traced: list[int] = []                 # the ranks from traces (in ``ranks`` of the Report); empty: none
    paired: list[InspectorPair] = []       # the traces' process groups and the communicators serving them


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


class OutlierKind(msgspec.Struct, kw_only=True):
    """A kind of collective with outliers (op, size bucket, process group; docs/metrics.md, "Collective
    outliers"): every instance's duration, in order of start, the outliers marked with their cause."""

    op: Optional[str]
    pg: Optional[str]
    bytes_min: int
    bytes_max: int
    matched: bool                          # instances matched across ranks, else one rank's each
    median_ns: int
    limit_ns: int                          # longer than this (and not slow in most steps): an outlier
    rank: list[int]                        # per instance: the rank named (the late rank of a wait, else its
    step: list[Optional[int]]              # longest member) and its step,
    start_ns: list[Optional[int]]          # its start on that rank's clock (null: logs without timestamps),
    duration_ns: list[int]                 # the longest member's duration,
    cause: list[Optional[str]]             # wait | transfer | early | unknown for an outlier, else null


class Diagnosis(msgspec.Struct, kw_only=True):
    """One finding for one rank and step: a verdict, why it was given, and what to try."""

    id: str                                # overlap-pattern | sync-stall | launch-order | memcpy-bound |
                                           # straggler | no-gpu-activity | clock-offset | nccl-transport |
                                           # overlap-tax | hidden-comm | parallelism | bucket-size |
                                           # config-mismatch | outlier | drift | slow-link
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
    # What removing the cause would save per step, as the step would lose it (docs/metrics.md, "What fixing a
    # cause saves"), with its interval; null where the trace cannot tell, and saving_note says why.
    saving_ns: Optional[int] = None
    saving_low_ns: Optional[int] = None
    saving_high_ns: Optional[int] = None
    saving_note: Optional[str] = None


class Verdict(msgspec.Struct, kw_only=True):
    """The run's answer: its biggest cause of exposed communication first (docs/metrics.md, "The run verdict")."""

    headline: str
    causes: list[Cause]                    # most costly first
