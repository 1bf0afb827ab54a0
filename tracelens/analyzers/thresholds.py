"""Every threshold a diagnosis decides with, in one place (docs/metrics.md explains each rule).

Users change them with ``tracelens report --threshold NAME=VALUE`` (repeatable) or with
``Thresholds(...)`` / :meth:`Thresholds.with_overrides` in the library API.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from ..errors import UsageError


@dataclass(frozen=True)
class Thresholds:
    # Overlap pattern (per step).
    two_phase_min_tail: float = 0.8          # share of comm time after the compute phase: at least this -> two-phase
    sawtooth_min_overlap_pct: float = 50.0   # at least this much of comm hidden (and not two-phase) -> sawtooth
    serialized_max_overlap_pct: float = 10.0  # at most this much hidden ...
    serialized_min_bursts: int = 3           # ... with comm in at least this many runs between compute -> serialized
    serialized_min_shared_fraction: float = 0.5  # comm time on a stream that also ran compute: at least this
                                             # share (taking turns as above) -> serialized before any other rule
    critical_exposed_fraction: float = 0.25  # exposed comm / step time from which a non-sawtooth step is critical
    # Sync stalls.
    stall_min_ns: int = 50_000               # device idle a sync caused below this: a brief sync, not a stall
    stall_critical_fraction: float = 0.2     # device idle stalls caused / step time from which a stall is critical
    # Launch order.
    launch_min_delay_ns: int = 50_000        # shorter launch-order delays are not reported
    launch_prompt_ns: int = 50_000           # a comm starting within this of its launch did not wait on the device
    # Materiality: a finding whose impact is below either floor is info at most (see material()).
    material_min_fraction: float = 0.03      # impact / step time
    material_min_ns: int = 100_000           # impact in ns
    # Stragglers (across ranks).
    straggler_min_excess: float = 0.1        # a rank's median step or compute time this far above the ranks' median
    straggler_min_late_share: float = 0.66   # causes at least this share of all the waiting for the last rank
    straggler_min_late_count: int = 5        # ... and is last in at least this many collectives (fewer: chance)
    straggler_min_reason_share: float = 0.5  # a reason names the late rank's cause when its excess is at least
                                             # this share of the rank's excess lead before its late collectives
    straggler_min_skew_ns: int = 10_000      # collectives whose arrival skew is below this have no last rank
    # Clock alignment and bandwidth (across ranks).
    clock_max_spread_ns: int = 50_000        # offsets whose end-time differences spread wider are not applied
    clock_min_offset_ns: int = 20_000        # smaller offsets are end-time noise on one clock: applied, not named
    bandwidth_min_bytes: int = 1_048_576     # smaller messages are latency-bound: no bandwidth verdicts
    # Slow links (across ranks): a communicator against its peers (same op, size bucket and host layout).
    slow_link_max_share: float = 0.5         # its median busbw below this share of its peers' median: a slow link
    slow_link_min_instances: int = 5         # fewer instances of it, or of its peers, than this: no verdict
    # Collective outliers (per operation, size bucket and process group).
    outlier_k: float = 5.0                   # above the group's median by more than this many robust deviations
    outlier_min_excess_ns: int = 1_000_000   # ... and by more than this: no alarm for microseconds
    outlier_min_group: int = 8               # fewer instances of a kind than this: no norm to be an outlier of
    # Drift over the capture (exposed communication, step time).
    drift_min_steps: int = 20                # fewer complete steps than this: no trend to speak of
    drift_min_change: float = 0.1            # the last tenth's median this far from the first's (share of median)
    drift_min_confidence: float = 0.99       # Kendall's confidence that the trend is monotonic
    # Copies.
    copy_bound_fraction: float = 0.5         # copy time nothing overlapped / step time from which copies dominate
    copy_critical_fraction: float = 0.8      # ... and from which that is critical
    # Overlap tax.
    tax_min_baseline: int = 3                # runs of a kernel with no communication beside it needed for a baseline
    tax_min_alone_unshaped: int = 8          # ... where the trace records no input shapes (a weaker identity)
    tax_max_spread: float = 0.25             # IQR / median of those runs above this: its work varies, not compared
    tax_confidence: float = 0.95             # the tax interval's confidence; slowed only where its low end is > 0
    # Network transport: inter-node bus bandwidth of large collectives (GB/s, 1 GB = 1e9 B).
    transport_tcp_max_busbw_gbps: float = 5.0     # median below this: in the range of TCP sockets
    transport_rdma_min_busbw_gbps: float = 15.0   # median above this: RDMA-class; between the two: ambiguous
    transport_min_bytes: int = 1_000_000          # smaller messages are latency-bound and left out

    def with_overrides(self, pairs: list[str] | tuple[str, ...]) -> "Thresholds":
        """Apply ``NAME=VALUE`` strings; unknown names or bad values raise :class:`UsageError`."""
        types = {f.name: f.type for f in fields(self)}
        changes = {}
        for pair in pairs:
            name, sep, value = pair.partition("=")
            name = name.strip().replace("-", "_")
            if not sep or name not in types:
                raise UsageError(f"unknown threshold {pair!r}; known: {', '.join(types)}")
            try:
                number = float(value) if types[name] in (float, "float") else int(value.replace("_", ""))
            except ValueError:
                raise UsageError(f"threshold {name} needs a {types[name]} value, got {value!r}") from None
            if number < 0:
                raise UsageError(f"threshold {name} must not be negative, got {value!r}")
            changes[name] = number
        return replace(self, **changes)


def material(th: Thresholds, impact_ns: int, step_ns: int) -> bool:
    """Whether a finding's impact (exposed communication, stall time, launch delay, …) matters: at least
    ``material_min_ns`` and at least ``material_min_fraction`` of its step. Below either floor a finding is
    ``info`` at most, so sub-millisecond noise in long steps and tiny absolute times in short ones do not
    raise warnings. Every diagnosis decides its severity through this one function."""
    return impact_ns >= th.material_min_ns and impact_ns >= th.material_min_fraction * max(step_ns, 0)
