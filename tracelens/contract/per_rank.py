"""One rank's part of the Report (``ranks[]``): its step metrics and their totals, the overlap pattern's
evidence, the exposure per parallelism dimension, the DDP bucket model and the settings checked against the
trace. Ratios are ``None`` (JSON null) when undefined, never NaN."""

from __future__ import annotations

from typing import Optional

import msgspec


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
    issued_in_compute: Optional[int] = None  # the step's collectives (all, not the tail's) issued during compute
    blocked_ns: Optional[int] = None       # CPU-only runs: the training thread's time inside collective calls
                                           # (c10d::*) in the step, where it could not compute


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
    no_fit: Optional[str] = None           # why the sizes gave no fit of latency and bandwidth; null with one


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
    # where the steps came from: "markers" (ProfilerStep#N), "nvtx" (--step-nvtx), "inferred" (the repeating
    # device work) or "whole-capture" (one step); None in a report written before it was recorded
    steps_from: Optional[str] = None
