"""The overlap pattern of a step (analyzers/rank/pattern.py): how much communication compute hides, and the
lever that fits the pattern."""

from __future__ import annotations

from .base import Finding, ms, noun, pct, verb


def _what(ev: dict) -> str:
    """``8 all-reduces``, or per operation ``8 collectives (5 all-to-alls, 3 all-reduces)``: the step's comm
    activities counted per collective, never all under the most frequent one."""
    n, ops = ev["comm_kernels"], ev.get("ops") or ({ev["op"]: ev["comm_kernels"]} if ev["op"] else {})
    parts = [f"{c} {noun(op, c, ev['mode'])}" for op, c in ops.items()]
    if len(parts) == 1 and sum(ops.values()) == n:
        return parts[0]
    if not parts:
        return f"{n} {noun(None, n, ev['mode'])}"
    rest = n - sum(ops.values())
    if rest:
        parts.append(f"{rest} without a collective record")
    return f"{n} {noun(None, n, ev['mode'])} ({', '.join(parts)})"


def _ddp(ev: dict) -> bool:
    """Whether bucket advice fits: a PyTorch program whose step communicates by all-reduce only (DDP's
    gradient buckets), never all-to-all, send/recv or a C program's reductions."""
    ops = ev.get("ops") or ({ev["op"]: 1} if ev["op"] else {})
    return ev.get("program", "pytorch") == "pytorch" and set(ops) == {"all_reduce"}


def _exposed(ev: dict) -> str:
    return f"{ms(ev['exposed_comm_ns'])} exposed ({pct(100 * (ev['exposed_comm_fraction'] or 0))} of the step)"


def _phase(ev: dict) -> str:
    return "the main thread's compute phase" if ev["mode"] == "cpu" else "the compute phase"


def _blocked(ev: dict) -> tuple[str, str]:
    """On a CPU step whose training thread sat inside collective calls for at least half of the exposed
    time: that, and the levers that act on it; else nothing."""
    b = ev.get("blocked_ns")
    if ev["mode"] != "cpu" or not b or 2 * b < ev["exposed_comm_ns"]:
        return "", ""
    return (f"; the training thread spent {ms(b)} inside collective calls (c10d::*), held up queueing them "
            "(a busy gloo worker, a late peer, a contended core) where it could have computed",
            "the training thread is blocked queueing collectives: fewer processes or threads per core (gloo's "
            "threads share them), or larger buckets so that fewer calls block")


def nothing_to_overlap(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    cpu = ev["mode"] == "cpu"
    where = "on the main thread" if cpu else "on the device"
    advice = ("if the training loop computes in this step, its CPU ops are missing from the trace (the "
              "profiler's CPU activity, or a trimmed file)") if cpu else \
        "a communication-only step (benchmark, barrier): there is no compute to hide it behind"
    return ("nothing to overlap: no compute in this step",
            f"{ms(ev['comm_ns'])} of communication ({_what(ev)}) and no compute {where}", advice)


def sawtooth(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    k = ev["started_during_compute"]
    lever = "a smaller last bucket or earlier launches hide more" if _ddp(ev) else "earlier launches hide more"
    advice = "" if not ev["exposed_comm_ns"] else f"{_exposed(ev)}: {lever}"
    return ("sawtooth: communication overlaps compute",
            f"{k} of {_what(ev)} {verb(k)} during {_phase(ev)}; {pct(ev['overlap_pct'])} of their time is hidden",
            advice)


def two_phase(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    k = ev["started_during_compute"]
    # "All start after" is an order of events: said only when no comm activity started before the phase end.
    if k == 0:
        lead = f"{_what(ev)} {'starts' if ev['comm_kernels'] == 1 else 'all start'} after {_phase(ev)}"
    else:
        lead = (f"{pct(100 * (ev['tail_fraction'] or 0))} of communication ({ms(ev['tail_ns'])} of "
                f"{ms(ev['comm_ns'])}) runs after {_phase(ev)}, {k} of {_what(ev)} {verb(k)} during it")
    if _ddp(ev):
        advice = ("check bucket_cap_mb (one bucket larger than the model), no_sync with a final all-reduce"
                  + (", or a sync before the optimizer" if ev["mode"] == "gpu" else ""))
    else:
        advice = ("start each collective as soon as its input is ready (issued earlier, not held behind unrelated "
                  "compute), and split the work into chunks so that one chunk's communication runs beside the next "
                  "one's compute")
    return ("two-phase: communication waits for the end of compute",
            f"{lead}; {_exposed(ev)}, {pct(ev['overlap_pct'])} hidden", advice)


def backlog(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    k, n = ev["issued_during_compute"], ev["tail_collectives"]
    if _ddp(ev):
        levers = ("gradient compression (a DDP comm hook: fp16/bf16 compression, PowerSGD), bf16/fp16 gradients, "
                  "fewer and larger buckets (less per-message overhead), a faster transport")
    else:
        levers = ("fewer bytes per message (bf16/fp16 payloads, compression), fewer or larger messages, a faster "
                  "transport")
    if ev["mode"] == "cpu":
        levers += "; gloo's threads share the cores with the training processes: fewer processes per core"
    held, _ = _blocked(ev)      # said as evidence: the backlog's levers (fewer processes per core) cover it
    return ("comm backlog: collectives issued during compute start late, queued behind earlier ones",
            f"{k} of the {n} collectives that start after {_phase(ev)} were issued during it, {ev['queued']} "
            f"of them queued behind earlier communication; {ms(ev['backlog_ns'])} of the {ms(ev['tail_ns'])} "
            f"after it is communication issued during it; {_exposed(ev)}, {pct(ev['overlap_pct'])} hidden{held}",
            "the communication is throughput-bound, not issued late (smaller buckets or earlier launches will not "
            f"hide it): send fewer bytes or get more bandwidth: {levers}")


def serialized_on_compute_stream(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    how = "NCCL's internal stream, async_op=True" if ev.get("program", "pytorch") == "pytorch" else \
        "a stream of their own, synchronised with events"
    return ("serialized: communication on the compute stream, taking turns with compute",
            f"{pct(100 * ev['comm_on_compute_stream'])} of communication time runs on a stream that also runs "
            f"compute; {_what(ev)} in {ev['bursts']} bursts between compute, {pct(ev['overlap_pct'])} hidden; "
            f"{_exposed(ev)}",
            f"issue collectives on their own stream ({how}), not the compute stream: nothing on one stream can "
            "overlap")


def serialized(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    advice = ("run collectives on their own stream (not the compute stream) and check launch order "
              "(CUDA_DEVICE_MAX_CONNECTIONS)") if ev["mode"] == "gpu" else \
        "check that collectives are issued asynchronously (async_op=True / DDP hooks)"
    return ("serialized: communication between compute, never alongside it",
            f"{_what(ev)} run in {ev['bursts']} bursts between compute but only {pct(ev['overlap_pct'])} of "
            f"their time is hidden; {_exposed(ev)}", advice)


def partial(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    held, levers = _blocked(ev)
    n, k = ev["comm_kernels"], ev.get("issued_in_compute") or 0
    tail = ev["tail_fraction"] or 0
    if 2 * (ev.get("backlog_ns") or 0) > ev["tail_ns"] and tail >= 0.5:
        # Issued during compute but run after it: neither earlier launches nor smaller buckets act on that.
        return ("partial overlap: collectives issued during compute run after it",
                f"{k} of {_what(ev)} {verb(k)} issued during {_phase(ev)}, yet {pct(100 * tail)} of communication "
                f"runs after it, {ms(ev['backlog_ns'])} of that theirs; {_exposed(ev)}{held}",
                levers or "they were issued in time and held up after: look at what delays them (a busy "
                "communication thread or stream, a dependency on other work)")
    lever = "smaller or earlier buckets; " if _ddp(ev) else ""
    # A blocked training thread is the measured cause: its levers, not the bucket advice they contradict.
    return ("partial overlap",
            f"{pct(ev['overlap_pct'])} of communication is hidden and {pct(100 * tail)} "
            f"runs after {_phase(ev)}; {_exposed(ev)}{held}",
            levers or f"{lever}launch collectives before the compute they can hide behind")


SENTENCES = {
    ("overlap-pattern", "nothing-to-overlap"): nothing_to_overlap,
    ("overlap-pattern", "sawtooth"): sawtooth,
    ("overlap-pattern", "two-phase"): two_phase,
    ("overlap-pattern", "backlog"): backlog,
    ("overlap-pattern", "serialized-on-compute-stream"): serialized_on_compute_stream,
    ("overlap-pattern", "serialized"): serialized,
    ("overlap-pattern", "partial"): partial,
}
