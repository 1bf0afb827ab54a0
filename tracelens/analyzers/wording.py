"""Every sentence of every finding: the title, detail and advice that a Diagnosis carries.

Analyzers decide a finding (its id, severity and, where an id has several sentences, its verdict) and
measure its evidence; this module only words it, one function per id and verdict. A function reads the
finding's evidence (and its step) and formats it: it never measures, sums, picks a maximum or compares
against a threshold, so every number a sentence states is one of the evidence values as printed (ms with
three decimals and percentages with one decimal, as the report's tables print them; docs/metrics.md,
"Sentences"). It lives with the analyzers, not beside the renderers: a renderer shows the texts a report already holds (a saved JSON report is re-rendered
without its traces), so only :func:`diagnosis` turns findings into report entries.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Optional

from ..contract import Diagnosis


@dataclass
class Finding:
    """What an analyzer found: a Diagnosis without its sentences.

    ``verdict`` names which sentences an id with several uses (the overlap pattern, a sync stall's kind, a
    straggler's slower time); it is not part of the report, whose evidence already holds what decided it."""

    id: str
    severity: str
    rank: int
    step: Optional[int]
    verdict: Optional[str]
    evidence: dict


def diagnosis(f: Finding) -> Diagnosis:
    """The report entry of a finding: its sentences from :data:`WORDING`, everything else as found."""
    title, detail, advice = WORDING[f.id, f.verdict](f)
    if "peer_wait" in f.evidence:
        advice = _waiting_advice(f.evidence["peer_wait"])
    return Diagnosis(id=f.id, severity=f.severity, rank=f.rank, step=f.step, title=title, detail=detail,
                     advice=advice, evidence=f.evidence)


def _waiting_advice(pw: dict) -> str:
    """For a finding whose exposed time is mostly the wait for a late rank (analyzers/run/verdict.py)."""
    who = "the last rank to arrive at each collective" if pw["rank"] is None else f"rank {pw['rank']}"
    where = "exposed here" if pw.get("of", "step") == "step" else "this rank exposes in all"
    return (f"{_ms(pw['wait_ns'])} of the {_ms(pw['exposed_ns'])} {where} is waiting for {who}: no bucket, "
            "launch or stream change hides it; "
            + ("see the run verdict" if pw["rank"] is None else f"see the straggler finding of rank {pw['rank']}"))


def _ms(ns: int) -> str:
    """A time as the report's tables print it: ms with three decimals."""
    return f"{ns / 1e6:.3f} ms"


def _pct(value: float | None) -> str:
    """A share as the report's tables print it: one decimal."""
    return "none" if value is None else f"{value:.1f} %"


def _verb(n: int) -> str:
    return "starts" if n == 1 else "start"


# ------------------------------------------------------------------------------- overlap-pattern

_NOUNS = {"all_reduce": "all-reduce", "allreduce": "all-reduce", "all_gather": "all-gather",
          "reduce_scatter": "reduce-scatter", "all_to_all": "all-to-all", "broadcast": "broadcast",
          "send_recv": "send/recv"}


def _noun(op: str | None, n: int, mode: str) -> str:
    noun = _NOUNS.get(op or "", "comm kernel" if mode == "gpu" else "collective")
    return f"{noun}{'' if n == 1 else 's'}"


def _what(ev: dict) -> str:
    """``8 all-reduces``, or per operation ``8 collectives (5 all-to-alls, 3 all-reduces)``: the step's comm
    activities counted per collective, never all under the most frequent one."""
    n, ops = ev["comm_kernels"], ev.get("ops") or ({ev["op"]: ev["comm_kernels"]} if ev["op"] else {})
    parts = [f"{c} {_noun(op, c, ev['mode'])}" for op, c in ops.items()]
    if len(parts) == 1 and sum(ops.values()) == n:
        return parts[0]
    if not parts:
        return f"{n} {_noun(None, n, ev['mode'])}"
    rest = n - sum(ops.values())
    if rest:
        parts.append(f"{rest} without a collective record")
    return f"{n} {_noun(None, n, ev['mode'])} ({', '.join(parts)})"


def _ddp(ev: dict) -> bool:
    """Whether bucket advice fits: a PyTorch program whose step communicates by all-reduce only (DDP's
    gradient buckets), never all-to-all, send/recv or a C program's reductions."""
    ops = ev.get("ops") or ({ev["op"]: 1} if ev["op"] else {})
    return ev.get("program", "pytorch") == "pytorch" and set(ops) == {"all_reduce"}


def _exposed(ev: dict) -> str:
    return f"{_ms(ev['exposed_comm_ns'])} exposed ({_pct(100 * (ev['exposed_comm_fraction'] or 0))} of the step)"


def _phase(ev: dict) -> str:
    return "the main thread's compute phase" if ev["mode"] == "cpu" else "the compute phase"


def nothing_to_overlap(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    cpu = ev["mode"] == "cpu"
    where = "on the main thread" if cpu else "on the device"
    advice = ("if the training loop computes in this step, its CPU ops are missing from the trace (the "
              "profiler's CPU activity, or a trimmed file)") if cpu else \
        "a communication-only step (benchmark, barrier): there is no compute to hide it behind"
    return ("nothing to overlap: no compute in this step",
            f"{_ms(ev['comm_ns'])} of communication ({_what(ev)}) and no compute {where}", advice)


def sawtooth(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    k = ev["started_during_compute"]
    lever = "a smaller last bucket or earlier launches hide more" if _ddp(ev) else "earlier launches hide more"
    advice = "" if not ev["exposed_comm_ns"] else f"{_exposed(ev)}: {lever}"
    return ("sawtooth: communication overlaps compute",
            f"{k} of {_what(ev)} {_verb(k)} during {_phase(ev)}; {_pct(ev['overlap_pct'])} of their time is hidden",
            advice)


def two_phase(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    k = ev["started_during_compute"]
    # "All start after" is an order of events: said only when no comm activity started before the phase end.
    if k == 0:
        lead = f"{_what(ev)} {'starts' if ev['comm_kernels'] == 1 else 'all start'} after {_phase(ev)}"
    else:
        lead = (f"{_pct(100 * (ev['tail_fraction'] or 0))} of communication ({_ms(ev['tail_ns'])} of "
                f"{_ms(ev['comm_ns'])}) runs after {_phase(ev)}, {k} of {_what(ev)} {_verb(k)} during it")
    if _ddp(ev):
        advice = ("check bucket_cap_mb (one bucket larger than the model), no_sync with a final all-reduce"
                  + (", or a sync before the optimizer" if ev["mode"] == "gpu" else ""))
    else:
        advice = ("start each collective as soon as its input is ready (issued earlier, not held behind unrelated "
                  "compute), and split the work into chunks so that one chunk's communication runs beside the next "
                  "one's compute")
    return ("two-phase: communication waits for the end of compute",
            f"{lead}; {_exposed(ev)}, {_pct(ev['overlap_pct'])} hidden", advice)


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
    return ("comm backlog: collectives issued during compute start late, queued behind earlier ones",
            f"{k} of the {n} collectives that start after {_phase(ev)} were issued during it, {ev['queued']} "
            f"of them queued behind earlier communication; {_ms(ev['backlog_ns'])} of the {_ms(ev['tail_ns'])} "
            f"after it is communication issued during it; {_exposed(ev)}, {_pct(ev['overlap_pct'])} hidden",
            "the communication is throughput-bound, not issued late (smaller buckets or earlier launches will not "
            f"hide it): send fewer bytes or get more bandwidth: {levers}")


def serialized_on_compute_stream(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    how = "NCCL's internal stream, async_op=True" if ev.get("program", "pytorch") == "pytorch" else \
        "a stream of their own, synchronised with events"
    return ("serialized: communication on the compute stream, taking turns with compute",
            f"{_pct(100 * ev['comm_on_compute_stream'])} of communication time runs on a stream that also runs "
            f"compute; {_what(ev)} in {ev['bursts']} bursts between compute, {_pct(ev['overlap_pct'])} hidden; "
            f"{_exposed(ev)}",
            f"issue collectives on their own stream ({how}), not the compute stream: nothing on one stream can "
            "overlap")


def serialized(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    advice = ("run collectives on their own stream (not the compute stream) and check launch order "
              "(CUDA_DEVICE_MAX_CONNECTIONS)") if ev["mode"] == "gpu" else \
        "check that collectives are issued asynchronously (async_op=True / DDP hooks)"
    return ("serialized: communication between compute, never alongside it",
            f"{_what(ev)} run in {ev['bursts']} bursts between compute but only {_pct(ev['overlap_pct'])} of "
            f"their time is hidden; {_exposed(ev)}", advice)


def partial(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    lever = "smaller or earlier buckets; " if _ddp(ev) else ""
    return ("partial overlap",
            f"{_pct(ev['overlap_pct'])} of communication is hidden and {_pct(100 * (ev['tail_fraction'] or 0))} "
            f"runs after {_phase(ev)}; {_exposed(ev)}",
            f"{lever}launch collectives before the compute they can hide behind")


# ------------------------------------------------------------------------------------ sync-stall

def _sync_detail(f: Finding) -> str:
    ev = f.evidence
    top = ev["sites"][0]
    per = " in this step" if f.step is not None else ""
    comm = f"; {_ms(top['comm_in_flight_ns'])} of communication was in flight" if top["comm_in_flight_ns"] else ""
    detail = (f"{top['calls']}×{per}: the device idled {_ms(top['idle_caused_ns'])} because of it; CPU blocked "
              f"{_ms(top['blocked_ns'])}, device idle {_ms(top['idle_after_ns'])} after it{comm}")
    if len(ev["sites"]) > 1:
        detail += (f" ({ev['calls']} syncs from {len(ev['sites'])} call sites{per}: "
                   f"{_ms(ev['idle_caused_ns'])} device idle caused, {_ms(ev['blocked_ns'])} blocked)")
    return detail


def _site(ev: dict) -> str:
    top = ev["sites"][0]
    return top["site"] + (f" in {top['python_frame']}" if top["python_frame"] else "")


def sync_stall(f: Finding) -> tuple[str, str, str]:
    top = f.evidence["sites"][0]
    return (f"sync stall: {_site(f.evidence)}", _sync_detail(f),
            _sync_advice(top["site"], top["call"], f.evidence["program"], top["feeds"]))


def sync_at_end_of_step(f: Finding) -> tuple[str, str, str]:
    return f"sync at the end of the step: {_site(f.evidence)}", _sync_detail(f), ""


def host_wait(f: Finding) -> tuple[str, str, str]:
    return (f"host waits on queued device work, no stall: {_site(f.evidence)}", _sync_detail(f),
            "the device kept working while the CPU waited: removing the wait frees the CPU, not the device")


def brief_syncs(f: Finding) -> tuple[str, str, str]:
    return f"brief syncs, no stall: {_site(f.evidence)}", _sync_detail(f), ""


def _sync_advice(site: str, call: str, program: str, feeds: str | None) -> str:
    """What to try, from what the costliest call site is and what program it is in."""
    if feeds:
        return (f"the host reads this value to size the {_NOUNS.get(feeds, feeds)} that follows (its split sizes), "
                "so the read cannot simply be made asynchronous: reuse sizes known in advance (fixed or padded "
                "splits), or exchange the sizes earlier, out of the step's critical path")
    if program != "pytorch":
        return _cuda_sync_advice(call)
    if re.search(r"aten::(item|_local_scalar_dense|tolist|nonzero|is_nonzero)|aten::(to|_to_copy|copy_)\b", site) \
            and "Synchronize" in call:
        return ("a tensor is read on the CPU mid-step (.item(), .cpu(), .tolist(), printing, boolean "
                "indexing): keep it on the GPU, or read it after the step or every N steps")
    if "DeviceSynchronize" in call or call in ("Context Sync",):
        return "torch.cuda.synchronize() in the loop (often timing code): remove it or use CUDA events"
    if ("EventSynchronize" in call or call == "Event Sync") and "DistributedDataParallel.forward" in site:
        # c10d's Logger measures forward/backward/comm times with CUDA events (two syncs per measurement)
        # at iterations 1-10 and every 100th (Reducer::should_collect_runtime_stats).
        return ("DDP's runtime logging waits on its CUDA timer events in its first 10 iterations and every "
                "100th: profile later steps (tracelens collect --steps 10,2,5)")
    if "EventSynchronize" in call or call == "Event Sync":
        return "an event is waited on from the CPU (timers): read timings after the step"
    if "Memcpy" in call or "Memset" in call:
        return "a copy blocks the CPU: use pinned memory (pin_memory=True) and non_blocking=True"
    return "find the call site in the chain above and move the host read out of the step"


def _cuda_sync_advice(call: str) -> str:
    """The same levers for a program that is not PyTorch (a C/C++ CUDA or MPI program): CUDA runtime calls."""
    if "Memcpy" in call or "Memset" in call:
        return ("a synchronous copy holds the host until the device is done: copy with cudaMemcpyAsync from "
                "pinned host buffers (cudaHostAlloc / cudaMallocHost) on a non-default stream and synchronize "
                "only where the host reads the result, so the host prepares the next work while the device runs")
    if "DeviceSynchronize" in call or call in ("Context Sync",):
        return ("cudaDeviceSynchronize in the loop: wait only on the stream or event whose result the host "
                "reads (cudaStreamSynchronize, cudaEventSynchronize), after queueing the next work")
    if "EventSynchronize" in call or call == "Event Sync":
        return "an event is waited on from the CPU (timers): query it with cudaEventQuery or read timings later"
    return ("the host waits for the device mid-loop: queue the next work (asynchronous copies, more streams) "
            "before waiting, and wait only where the host reads a result")


# ---------------------------------------------------------------------------------- launch-order

def _short(name: str) -> str:
    """A kernel's name without ``void`` and its parameters, at most 60 characters."""
    name = name.removeprefix("void ")
    base = name.split("(")[0]
    return base if len(base) <= 60 else base[:59] + "…"


def launch_order(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    connections, queued, late = ev["cuda_device_max_connections"], ev["queued"], ev["late"]
    setting = f"CUDA_DEVICE_MAX_CONNECTIONS={connections} in this run" if connections is not None \
        else "CUDA_DEVICE_MAX_CONNECTIONS was not recorded"
    parts, advice, kinds = [], [], []
    if queued:
        worst = ev["collectives"][queued["worst"]]
        kinds.append("queued behind later-launched compute")
        parts.append(f"{queued['count']} comm kernel(s) waited {_ms(queued['delay_ns'])} behind compute "
                     f"launched after them (worst: {_short(worst['name'])} behind {_short(worst['kernels'][0])}, "
                     f"{_ms(worst['delay_ns'])})")
        advice.append("set CUDA_DEVICE_MAX_CONNECTIONS=1 so kernels start in launch order"
                      if connections != "1" else
                      "kernels already start in launch order here: check what the collective waits on")
    if late:
        worst = ev["collectives"][late["worst"]]
        kinds.append("launched too late")
        parts.append(f"{late['count']} comm kernel(s) were launched {_ms(late['delay_ns'])} after compute "
                     f"they could have overlapped had started (worst: {_short(worst['name'])} launched "
                     f"{_ms(worst['delay_ns'])} into {_short(worst['kernels'][0])})")
        advice.append(f"launch the collective before {_short(worst['kernels'][0])} (issue it as soon as its "
                      "input is ready)")
    return (f"launch order: exposed communication {' and '.join(kinds)}",
            "; ".join(parts) + f"; up to {_ms(ev['hideable_ns'])} could be hidden ({setting})", "; ".join(advice))


# ------------------------------------------------------------------------------------- straggler

def _straggler(f: Finding, what: str, excess: float) -> tuple[str, str, str]:
    ev = f.evidence
    step = f"median step {_ms(ev['step_ns'])} against {_ms(ev['ranks_step_ns'])}"
    compute = f"median compute {_ms(ev['compute_ns'])} against {_ms(ev['ranks_compute_ns'])}"
    first, second = (step, compute) if what == "step time" else (compute, step)
    return (f"straggler: {what} {_pct(100 * excess)} above the median of {ev['ranks']} ranks",
            f"{first}, {second} (over its {ev['steps']} complete steps and the {ev['ranks']} ranks; no collective "
            "was matched across ranks, so who waits for whom is not known)",
            "if the other ranks wait for this one: " + reason_advice("compute", ev.get("cpu", False))
            + "; and its input pipeline and host load")


def straggler_step_time(f: Finding) -> tuple[str, str, str]:
    return _straggler(f, "step time", f.evidence["step_excess"])


def straggler_compute_time(f: Finding) -> tuple[str, str, str]:
    return _straggler(f, "compute time", f.evidence["compute_excess"])


# The culprit's reason (analyzers/run/crossrank/straggler.py): what it is called, what it did before its late
# collectives, and what to try.
_REASON_WORDS = {"compute": "slower compute", "host-gap": "host gaps", "sync-stall": "a sync stall",
                 "late-launch": "late launches", "unknown": "cause unknown"}
_REASON_DOING = {"compute": "computing", "host-gap": "with its device idle and its CPU idle or loading data",
                 "sync-stall": "with its device idle after a blocking sync",
                 "late-launch": "with its device idle while its CPU ran ops"}


def reason_advice(reason: str, cpu: bool) -> str:
    """What to try on the rank the others wait for, by why it is late (``cpu``: a CPU-backend run)."""
    if reason == "compute":
        return ("compare its CPU load and threads (OMP_NUM_THREADS, other processes on its cores) and its data "
                "shapes with the other ranks'; rebalance the work if it gets more") if cpu else \
            ("compare its kernels, GPU clocks (power or thermal throttling) and data shapes with the other ranks'; "
             "rebalance the work if it gets more")
    if reason == "host-gap":
        return ("look at that rank's host before its late collectives: data loading (more DataLoader workers, "
                "pinned memory, prefetching), Python work between steps, CPU contention or a slower node")
    if reason == "sync-stall":
        return ("a blocking sync drains its device before these collectives (its sync-stall findings name the "
                "call site): remove it or move it out of the step")
    if reason == "late-launch":
        return ("its CPU launches work more slowly than its GPU runs it (Python and framework overhead, CPU "
                "contention): CUDA graphs or torch.compile cut the launches; check that rank's CPU affinity and load")
    return ("compare its timeline just before its late collectives with a waiting rank's: the profiler saw no "
            "difference in compute, idle or launches")


def _straggler_late(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    reason = ev["reason"]
    n = ev["late_count"]
    if reason == "unknown":
        why = (f"it came a mean {_ms(ev['lateness_ns'])} after the other ranks, but since they last met (the "
               f"previous step's collective, else the step's start) it took a mean {_ms(ev['lead_ns'])} to arrive "
               f"against {_ms(ev['ranks_lead_ns'])} on the others, and no one activity explains the difference")
        if ev["late_start_ns"] is not None:
            why += (f"; it began its first captured step {_ms(ev['late_start_ns'])} after the other ranks: look at "
                    "what it does between steps and before the capture")
    else:
        why = (f"before each it spent a mean {_ms(ev['lead_by_reason_ns'][reason])} {_REASON_DOING[reason]} "
               f"against {_ms(ev['ranks_lead_by_reason_ns'][reason])} on the other ranks, of "
               f"{_ms(ev['lead_ns'])} against {_ms(ev['ranks_lead_ns'])} since they last met (the previous step's "
               "collective, else the step's start)")
    skew = "" if ev["mean_skew_ns"] is None else f", a mean {_ms(ev['mean_skew_ns'])} after the first rank"
    return (f"straggler ({_REASON_WORDS[reason]}): the other ranks wait for it at {n} collective"
            f"{'' if n == 1 else 's'}, {_ms(ev['caused_wait_ns'])} of waiting in all",
            f"it arrives last at {n} of {ev['instances']} matched collectives{skew}, causing "
            f"{_pct(100 * ev['wait_share'])} of the waiting over {ev['ranks']} ranks; {why}",
            reason_advice(reason, ev["cpu"]))


def _offsets(units: list) -> str:
    def one(u):
        who = f"host {u['host']}" if u["host"] is not None else "rank " + ", ".join(map(str, u["ranks"]))
        off = "unknown (no collective shared)" if u["offset_ns"] is None else f"{u['offset_ns'] / 1e6:+.3f} ms"
        spread = "" if u["spread_ns"] is None else f" ± {_ms(u['spread_ns'])}"
        return f"{who} {off}{spread}"
    return "; ".join(one(u) for u in units[:6]) + (f"; and {len(units) - 6} more" if len(units) > 6 else "")


def clock_offset_corrected(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"clocks aligned: {ev['corrected']} clock offset{'s' if ev['corrected'] != 1 else ''} corrected against "
            f"rank {ev['reference_rank']}",
            f"offsets from the end times of matched collectives: {_offsets(ev['corrected_units'])}; cross-rank numbers use "
            "the aligned times, each rank's step metrics stay on its own clock",
            "")


def clock_offset_uncertain(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"clocks not aligned: {ev['uncertain']} clock offset{'s' if ev['uncertain'] != 1 else ''} too uncertain "
            "to correct",
            f"end times of matched collectives against rank {ev['reference_rank']} spread more than "
            f"{_ms(ev['max_spread_ns'])}: {_offsets(ev['uncertain_units'])}; arrival skew and the last rank are not "
            "given for collectives of these ranks (waits and transfers do not need clocks)",
            "record every rank in one capture window, or synchronise the hosts' clocks (NTP, PTP)")


# ------------------------------------------------------------------------------- no-gpu-activity

def no_gpu_activity(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    calls, gpus = ev["nccl_calls"], ev["gpus_listed"]
    listed = f", and lists {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else ""
    return ("no GPU activity recorded: the profiler recorded the CPU only",
            f"the trace has {calls} NCCL call{'s' if calls != 1 else ''} on the CPU{listed}, but no kernel, "
            "copy or sync on any GPU: communication and its overlap cannot be measured",
            "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] in torch.profiler.profile "
            "(tracelens collect does), or nsys profile -t cuda,nvtx")


# ---------------------------------------------------------------------------------- memcpy-bound

_COPY_WORDS = {"HtoD": "host-to-device", "DtoH": "device-to-host", "DtoD": "device-to-device", "HtoH": "host-to-host",
          "memset": "memory sets", "other": "other copies"}

_COPY_ADVICE = {
    "HtoD": "host-to-device copies hold the step up: load batches into pinned memory (DataLoader(pin_memory=True)), "
            "copy them with .to(device, non_blocking=True) and prefetch the next batch on a side stream while this "
            "one computes (or move data loading off the critical path); keep data that does not change on the GPU",
    "DtoH": "device-to-host copies hold the step up: avoid moving tensors to the CPU every step (.cpu(), .item(), "
            ".tolist(), logging); copy into pinned buffers with non_blocking=True and read them a step later",
    "DtoD": "device-to-device copies hold the step up: look for .contiguous(), .clone(), torch.cat and dtype or "
            "layout conversions that copy whole tensors, and for weights or buffers copied every step",
    "memset": "memory sets hold the step up: buffers are zeroed every step (zero_grad(set_to_none=False), "
              "torch.zeros); set gradients to None and allocate with torch.empty where values are overwritten",
}
_COPY_GENERIC = "memory copies hold the step up: move them off the critical path (pinned memory, non_blocking copies, " \
           "prefetching on a side stream)"
_COPY_PAGEABLE = "copies from pageable memory are staged through a bounce buffer and block the host: pin the host " \
            "buffers (pin_memory=True); "



# The same levers in CUDA runtime terms, for a program that is not PyTorch (a C/C++ CUDA or MPI program).
_COPY_ADVICE_CUDA = {
    "HtoD": "host-to-device copies hold the step up: copy from pinned host buffers (cudaHostAlloc / cudaMallocHost) "
            "with cudaMemcpyAsync on a stream of their own, so the next copy runs while this work computes; keep "
            "data that does not change on the device",
    "DtoH": "device-to-host copies hold the step up: copy into pinned host buffers with cudaMemcpyAsync on a stream "
            "of their own and wait for them only where the host reads them",
    "DtoD": "device-to-device copies hold the step up: look for whole buffers copied every iteration that could be "
            "computed in place or shared",
    "memset": "memory sets hold the step up: buffers are cleared every iteration; clear only what is not "
              "overwritten, asynchronously (cudaMemsetAsync)",
}
_COPY_GENERIC_CUDA = "memory copies hold the step up: move them off the critical path (pinned host buffers, " \
    "cudaMemcpyAsync on a stream of their own beside the compute)"
_COPY_PAGEABLE_CUDA = "copies from pageable memory are staged through a bounce buffer and block the host: allocate " \
    "the host buffers pinned (cudaHostAlloc, or cudaHostRegister on existing ones); "


def memcpy_bound(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    top, parts = ev["top_direction"], ev["by_direction"]
    torch = ev.get("program", "pytorch") == "pytorch"
    advice = (_COPY_ADVICE if torch else _COPY_ADVICE_CUDA).get(top, _COPY_GENERIC if torch else _COPY_GENERIC_CUDA)
    memcpy_ns = ev["memcpy_ns"]
    if top != "memset" and memcpy_ns and ev["pageable_ns"] * 2 >= memcpy_ns:
        advice = (_COPY_PAGEABLE if torch else _COPY_PAGEABLE_CUDA) + advice
    listed = ", ".join(f"{_COPY_WORDS.get(d, d)} {_ms(v)}" for d, v in
                       sorted(parts.items(), key=lambda kv: -kv[1]) if v >= 5_000) or "each under 0.01 ms"
    return (f"memory copies fill {_pct(100 * ev['copy_fraction'])} of the step",
            f"{_ms(ev['exposed_copy_ns'])} of the {_ms(ev['duration_ns'])} step ran nothing but copies and sets "
            f"({listed}); compute {_ms(ev['compute_ns'])}, communication {_ms(ev['comm_ns'])}",
            advice)


# ----------------------------------------------------------------------------------- overlap-tax

_TAX_LEVERS = ("give the collectives fewer SMs (NCCL_MAX_CTAS, NCCL_NCHANNELS_PER_NET_PEER) or move them to the "
               "copy engines (NCCL 2.28+ copy-engine collectives, which use no SMs); fewer, larger buckets "
               "(bucket_cap_mb) overlap fewer kernels; CUDA_DEVICE_MAX_CONNECTIONS and a higher-priority "
               "compute stream decide which kernels the collectives share the GPU with")


def _taxed(k: dict) -> str:
    under = f" under {_NOUNS.get(k['collective']) or _short(k['collective'])}" if k["collective"] else ""
    return (f"{_short(k['name'])} ran {_ms(k['mean_ns'])} instead of {_ms(k['baseline_ns'])} alone{under} "
            f"({k['runs']}× against {k['alone']} runs alone: {_ms(k['shift_ns'])} slower, "
            f"{_ms(k['shift_low_ns'])}-{_ms(k['shift_high_ns'])}; {_ms(k['tax_ns'])})")


def _left(k: dict) -> str:
    if k["reason"] == "varies":
        return (f"{_short(k['name'])} ran {_ms(k['alone_min_ns'])}-{_ms(k['alone_max_ns'])} over its "
                f"{k['alone']} runs alone ({k['runs']}× under communication)")
    return f"{_short(k['name'])} ({k['alone']} run{'s' if k['alone'] != 1 else ''} alone, {k['runs']}× under communication)"


def overlap_tax(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    kernels = "; ".join(_taxed(k) for k in ev["kernels"])
    n, u, v = ev["compared"], ev["uncompared"], ev["varying"]
    left = []
    if u:
        left.append(f"{u} with too few runs alone to compare")
    if v:
        left.append(f"{v} whose work varies (runs alone spread over more than {_pct(100 * ev['max_spread'])} "
                    "of their median, or without input shapes under communication)")
    out = f"; left out: {', '.join(left)}, e.g. {'; '.join(_left(k) for k in ev['left_out'])}" if left else ""
    return (f"overlap tax: compute ran {_ms(ev['overlap_tax_ns'])} slower beside communication "
            f"({_pct(100 * ev['tax_fraction'])} of step time; {_pct(100 * ev['confidence'])} interval "
            f"{_ms(ev['overlap_tax_low_ns'])}-{_ms(ev['overlap_tax_high_ns'])})",
            f"{n} kernel{'s' if n != 1 else ''} under communication compared with their runs alone, "
            f"{ev['slowed']} of {ev['identities']} kernel identit{'y' if ev['identities'] == 1 else 'ies'} "
            f"slower beyond their spread: {kernels}; "
            f"hiding {_ms(ev['overlap_ns'])} of communication cost {_ms(ev['overlap_tax_ns'])} (at least "
            f"{_ms(ev['overlap_tax_low_ns'])}), so it really costs {_ms(ev['effective_exposed_ns'])} "
            f"({_ms(ev['exposed_comm_ns'])} exposed + tax){out}",
            _TAX_LEVERS)


# ----------------------------------------------------------------------------------- hidden-comm

def _runs(items: list[dict]) -> str:
    """``flux::gemm_rs_kernel (compute, 8×, 3.20 ms)``: device work by name."""
    return ", ".join(f"{k['name'] if k['kind'] in ('memcpy', 'memset') else _short(k['name'])} ({k['kind']}, "
                     f"{k['count']}×, {_ms(k['time_ns'])})" for k in items)


def _hidden_advice(ev: dict) -> str:
    if ev["comm_pattern"]:
        return (f"if they move data between GPUs, count them as communication: tracelens report --comm-pattern "
                f"'{ev['comm_pattern']}'; until then overlap and exposed communication leave them out")
    return ("find the kernels that carry the collectives in the timeline (a custom, fused or CUDA-graph-replayed "
            "kernel) and name them with --comm-pattern REGEX; if the trace lost them, profile again")


def _intent(ev: dict) -> str:
    return ", ".join(f"{s['name']} ×{s['count']}" for s in ev["scope_names"])


def hidden_no_comm_kernel(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    n, k = ev["scopes"], ev["scopes_without_comm"]
    parts = []
    if ev["launched"]:
        parts.append(f"launched inside them: {_runs(ev['launched'])}")
    if ev["look_alike"]:
        parts.append(f"kernels named like communication: {_runs(ev['look_alike'])}")
    ran = "; ".join(parts) if parts else "no device work is linked to them and no kernel is named like communication"
    return (f"hidden communication: {n} collective call{'s' if n != 1 else ''} but no communication on the device",
            f"{k} of {n} collective scopes ({_intent(ev)}) have no communication kernel or copy; {ran}",
            _hidden_advice(ev))


def hidden_look_alike(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    why = f"{ev['scopes']} collective calls" if ev["scopes"] else f"world size {ev['world_size']}"
    return ("hidden communication: kernels named like communication count as compute",
            f"{_runs(ev['look_alike'])} ran as compute ({_ms(ev['look_alike_ns'])} in all) in a run that "
            f"communicates ({why}; {_ms(ev['comm_ns'])} classified as communication)",
            _hidden_advice(ev))


# -------------------------------------------------------------------------------- nccl-transport

def _quote(lines: list[dict]) -> str:
    """``nccl/a.log:12 "NET/Socket : Using [0]eth0:…"``: each deciding line by file name and number (a
    recorded setting by its source alone), NCCL's message without the host:pid:tid prefix."""
    out = []
    for e in lines:
        where = e["file"].replace("\\", "/").rsplit("/", 1)[-1] + (f":{e['line']}" if e["line"] is not None else "")
        text = re.split(r"NCCL (?:INFO|WARN) ", e["text"], maxsplit=1)[-1]
        out.append(f'{where} "{text}"')
    return "; ".join(out)


def _bandwidth(ev: dict) -> str:
    bw = ev["bandwidth"]
    if bw is None:
        return ""
    where = {"tcp": f"the TCP range (below {bw['tcp_max_gbps']:g} GB/s)",
             "rdma": f"the RDMA range (above {bw['rdma_min_gbps']:g} GB/s)",
             "ambiguous": f"between the TCP and RDMA ranges ({bw['tcp_max_gbps']:g}-{bw['rdma_min_gbps']:g} GB/s)"}
    return (f"inter-node bus bandwidth {bw['p50_gbps']:.2f} GB/s (median of {bw['collectives']} "
            f"collective{'s' if bw['collectives'] != 1 else ''}), in {where[bw['range']]}")


def _transport_detail(lead: str, ev: dict) -> str:
    parts = [lead + (": " + _quote(ev["lines"]) if ev["lines"] else "")]
    if ev["bandwidth"] is not None:
        parts.append(_bandwidth(ev) + (" although the logs say RDMA" if ev["bandwidth_disagrees"] else ""))
    return "; ".join(parts)


_RDMA_CHECKS = ("ibv_devinfo on every node (devices listed, port state PORT_ACTIVE), the container's "
                "/dev/infiniband (--device=/dev/infiniband or the RDMA device plugin), NCCL_IB_HCA naming "
                "devices that exist (NCCL_IB_GID_INDEX for RoCE), libibverbs installed, and the NET plugin path "
                "(NCCL_NET_PLUGIN, LD_LIBRARY_PATH)")
_COLLECT = ("collect the NCCL logs: NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET with NCCL_DEBUG_FILE=<dir>/%h.%p.log "
            "(tracelens collect sets them), then tracelens report with the logs")
_DISAGREE = ("the logs and the bandwidth disagree: check that every rank's log is there (one rank on sockets "
             "slows all), and compare with an nccl-tests run on the same nodes")


def _net(ev: dict) -> str:
    return f" ({ev['net']})" if ev["net"] else ""


def tcp_silent_fallback(f: Finding) -> tuple[str, str, str]:
    return ("network transport: TCP sockets between nodes, a silent fallback from RDMA",
            _transport_detail("NCCL fell back to TCP sockets where RDMA was expected", f.evidence),
            f"find why RDMA failed: {_RDMA_CHECKS}; NCCL_NET=IB makes NCCL stop with an error instead of "
            "falling back")


def tcp_no_rdma(f: Finding) -> tuple[str, str, str]:
    return ("network transport: TCP sockets between nodes, no RDMA found",
            _transport_detail("NCCL uses TCP sockets between nodes and found no RDMA device", f.evidence),
            "expected on an Ethernet-only cluster, but inter-node collectives run several times slower than over "
            f"RDMA; if the nodes have InfiniBand or RoCE, check {_RDMA_CHECKS}; on TCP, raise "
            "NCCL_SOCKET_NTHREADS and NCCL_NSOCKS_PERTHREAD")


def tcp_deliberate(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    by = " and ".join(ev["forced_by"])
    return ("network transport: TCP sockets, chosen deliberately",
            _transport_detail(f"TCP was forced by {by}", ev),
            f"intended by {by}: if the nodes have InfiniBand or RoCE, remove it to use RDMA")


def tcp_suspected(f: Finding) -> tuple[str, str, str]:
    return ("network transport: TCP suspected from the bandwidth",
            _transport_detail("no NCCL log line says which transport was used", f.evidence), _COLLECT)


def rdma_gdr(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"network transport: RDMA{_net(ev)} with GPUDirect RDMA",
            _transport_detail("network connections use RDMA straight from GPU memory", ev),
            _DISAGREE if ev["bandwidth_disagrees"] else "")


def rdma_host_staged(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    advice = ("GPUDirect RDMA is off: check that the nvidia-peermem module is loaded, NCCL_NET_GDR_LEVEL, and "
              "how far the GPU sits from its NIC (nvidia-smi topo -m)")
    return (f"network transport: RDMA{_net(ev)} without GPUDirect, staged through host memory",
            _transport_detail("network connections use RDMA without /GDRDMA", ev),
            f"{_DISAGREE}; {advice}" if ev["bandwidth_disagrees"] else advice)


def rdma_init_only(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    advice = ("connection lines would confirm it (\"via NET/IB/0/GDRDMA\"): keep NCCL_DEBUG_SUBSYS at INIT,NET "
              "and let the run reach its first collective")
    return (f"network transport: RDMA{_net(ev)} initialised, no connection lines",
            _transport_detail("NCCL set up an RDMA network", ev),
            f"{_DISAGREE}; {advice}" if ev["bandwidth_disagrees"] else advice)


def intra_node_only(f: Finding) -> tuple[str, str, str]:
    return ("network transport: not used, every connection stays within one node",
            _transport_detail("no connection leaves the node", f.evidence), "")


def transport_inconclusive(f: Finding) -> tuple[str, str, str]:
    return ("network transport: inconclusive from the NCCL logs",
            _transport_detail("the lines read do not say which transport carried traffic between nodes",
                              f.evidence), _COLLECT)


def transport_unknown(f: Finding) -> tuple[str, str, str]:
    return ("network transport: unknown (no NCCL logs)",
            _transport_detail("no NCCL log was given", f.evidence), _COLLECT)


# ------------------------------------------------------------------------------- parallelism

_DIM_TITLE = {"dp": "data parallel", "fsdp": "sharded data parallel (FSDP)", "tp": "tensor parallel",
              "pp": "pipeline parallel", "ep": "expert parallel", "emb": "sharded embedding",
              "cp": "context parallel", "unknown": "unattributed"}


def _connections(ev: dict) -> str:
    v = ev["max_connections"]
    if v is None:
        return "CUDA_DEVICE_MAX_CONNECTIONS is not recorded"
    return f"CUDA_DEVICE_MAX_CONNECTIONS={v} was recorded"


def _dim_advice(ev: dict) -> str:
    dim = ev["dimension"]
    if dim == "dp":
        return ("DDP: a smaller bucket_cap_mb starts the all-reduces earlier in the backward (fewer, larger buckets "
                "cut per-collective latency instead); with gradient accumulation, no_sync() on all but the last "
                "micro-batch")
    if dim == "fsdp":
        return ("prefetch the next all-gather (FSDP forward_prefetch and backward_prefetch=BACKWARD_PRE; FSDP2 "
                "set_modules_to_forward_prefetch / set_modules_to_backward_prefetch), keep limit_all_gathers on so "
                "memory does not stall them, and reshard_after_forward=False for the last layers (no all-gather "
                "again in the backward)")
    if dim == "tp":
        return ("overlap the TP collectives with their GEMMs: TransformerEngine userbuffers (ub_overlap_ag / "
                "ub_overlap_rs) or Megatron --tp-comm-overlap; before Blackwell, CUDA_DEVICE_MAX_CONNECTIONS=1 "
                "starts kernels in launch order, so launch the collective before the GEMM it should hide under "
                f"({_connections(ev)})")
    if dim == "pp":
        size = "PP" if ev["group_size"] is None else str(ev["group_size"])
        m = ev.get("micro_batches")
        expect = "" if m is None else \
            (f" (stage {ev['stage']} sends for {m} micro-batch{'' if m == 1 else 'es'} a step: "
             f"{_pct(100 * ev['expected_bubble'])} of the step if it is plain 1F1B)")
        return (f"a 1F1B schedule idles ({size} − 1)(F + B) per step, ({size} − 1)/(m + {size} − 1) of it with m "
                f"micro-batches{expect}: more micro-batches, an interleaved schedule (virtual pipeline stages), or a "
                "zero-bubble / DualPipe schedule shrink it; the device was idle "
                f"{_ms(ev['idle_ns'])} in these steps")
    if dim == "ep":
        return ("overlap the all-to-all dispatch and combine with expert compute (DeepEP, Megatron MoE "
                "all-to-all overlap, splitting the batch into micro-batches that alternate); "
                "CUDA_DEVICE_MAX_CONNECTIONS=1 serializes them in launch order, so launch the all-to-all before "
                f"the expert GEMMs ({_connections(ev)})")
    if dim == "emb":
        return ("pipeline the embedding lookups: TorchRec's TrainPipelineSparseDist runs the next batch's input "
                "distribution (the KJT all-to-alls) during this batch's forward and backward "
                "(PrefetchTrainPipelineSparseDist also prefetches cached embeddings); shrink the pooled-embedding "
                "all-to-alls with quantized comms (qcomm codecs, FP16/BF16 forward and backward) or a sharding "
                "plan that moves fewer embeddings between ranks")
    if dim == "cp":
        return "overlap the ring-attention send/recv with the attention of the previous chunk"
    return ("name the process groups (new_group(group_desc=...), DeviceMesh mesh_dim_names) so their "
            "communication can be attributed")


def parallelism(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    groups = ", ".join(ev["groups"]) or "no named process group"
    ops = ", ".join(_NOUNS.get(o, o) for o in ev["ops"]) or "communication"
    # A whole-trace window has no step number to point at, and one step is not "most exposed" of anything.
    worst = (f"; most exposed in step {ev['worst_step']}" if ev["worst_step"] is not None and ev["steps"] > 1
             else "")
    over = "over 1 step" if ev["steps"] == 1 else f"over {ev['steps']} steps"
    return (f"{_DIM_TITLE[ev['dimension']]} communication exposed: {_ms(ev['exposed_comm_ns'])} "
            f"({_pct(100 * ev['exposed_fraction'])} of step time)",
            f"{ev['collectives']} collective{'' if ev['collectives'] == 1 else 's'} ({ops}) in {groups}: "
            f"{_ms(ev['comm_ns'])} of communication {over}, {_pct(ev['overlap_pct'])} hidden{worst}",
            _dim_advice(ev))


def bucket_size(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"bucket size: bucket_cap_mb={ev['suggested_cap_mib']} would expose {_ms(ev['suggested_exposed_ns'])} "
            f"of all-reduce per step instead of {_ms(ev['observed_exposed_ns'])}",
            f"the WFBP model of step {ev['step']}'s {ev['buckets']} buckets (backward {_ms(ev['backward_ns'])}, "
            f"each all-reduce {_ms(ev['latency_ns'])} + its size at {ev['gbps']:.1f} GB/s) gives "
            f"{_ms(ev['model_exposed_ns'])} exposed for the buckets as they are",
            f"set DistributedDataParallel(bucket_cap_mb={ev['suggested_cap_mib']}) and compare: the model "
            "assumes gradients become ready at a constant rate and ignores the cost of more, smaller collectives "
            "beyond their latency")


def config_mismatch(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"{ev['setting']}={ev['configured']} does not match the trace",
            f"{ev['setting']}={ev['configured']} ({ev['source']}), the trace shows {ev['observed']}: "
            f"{ev['contradiction']}",
            "check that the setting reaches the training processes (the launcher's environment, the code that "
            "reads the option) and that it is the one wanted")


WORDING: dict[tuple[str, Optional[str]], Callable[[Finding], tuple[str, str, str]]] = {
    ("overlap-pattern", "nothing-to-overlap"): nothing_to_overlap,
    ("overlap-pattern", "sawtooth"): sawtooth,
    ("overlap-pattern", "two-phase"): two_phase,
    ("overlap-pattern", "backlog"): backlog,
    ("overlap-pattern", "serialized-on-compute-stream"): serialized_on_compute_stream,
    ("overlap-pattern", "serialized"): serialized,
    ("overlap-pattern", "partial"): partial,
    ("sync-stall", "stall"): sync_stall,
    ("sync-stall", "end-of-step"): sync_at_end_of_step,
    ("sync-stall", "host-wait"): host_wait,
    ("sync-stall", "brief"): brief_syncs,
    ("launch-order", None): launch_order,
    ("straggler", "step-time"): straggler_step_time,
    ("straggler", "compute-time"): straggler_compute_time,
    **{("straggler", r): _straggler_late for r in ("compute", "host-gap", "sync-stall", "late-launch", "unknown")},
    ("clock-offset", "corrected"): clock_offset_corrected,
    ("clock-offset", "uncertain"): clock_offset_uncertain,
    ("no-gpu-activity", None): no_gpu_activity,
    ("memcpy-bound", None): memcpy_bound,
    ("overlap-tax", None): overlap_tax,
    ("hidden-comm", "no-comm-kernel"): hidden_no_comm_kernel,
    ("hidden-comm", "look-alike"): hidden_look_alike,
    ("nccl-transport", "tcp_silent_fallback"): tcp_silent_fallback,
    ("nccl-transport", "tcp_no_rdma"): tcp_no_rdma,
    ("nccl-transport", "tcp_deliberate"): tcp_deliberate,
    ("nccl-transport", "tcp_suspected"): tcp_suspected,
    ("nccl-transport", "rdma_gdr"): rdma_gdr,
    ("nccl-transport", "rdma_host_staged"): rdma_host_staged,
    ("nccl-transport", "rdma_init_only"): rdma_init_only,
    ("nccl-transport", "intra_node_only"): intra_node_only,
    ("nccl-transport", "inconclusive"): transport_inconclusive,
    ("nccl-transport", "unknown"): transport_unknown,
    ("bucket-size", None): bucket_size,
    ("config-mismatch", None): config_mismatch,
    **{("parallelism", d): parallelism for d in ("dp", "fsdp", "tp", "pp", "ep", "emb", "cp", "unknown")},
}
"""The sentences of every finding, by (id, verdict)."""


# ----------------------------------------------------------------------------------- run verdict

def ranks_label(ranks: list[int], total: int | None = None) -> str:
    """``ranks 0–2, 4–6``, ``rank 3``; past six ranges, ``12 of 16 ranks`` (``total``: of how many)."""
    if not ranks:
        return "no rank"
    spans, lo = [], ranks[0]
    for a, b in zip(ranks, ranks[1:] + [None]):
        if b != a + 1:
            spans.append(str(lo) if lo == a else f"{lo}–{a}")
            lo = b
    if len(spans) > 6:
        return f"{len(ranks)} of {total} ranks" if total else f"{len(ranks)} ranks"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(spans)


_CAUSE_WORDS = {"peer-wait": "waiting for other ranks", "not-overlapped": "transfers no compute hides",
                "overlap-tax": "the overlap tax"}


def _cost(c) -> str:
    """A cause's cost as the verdict words it, with the digits of every other time and share of the report
    (its table prints the same: renderers/common.verdict_cells)."""
    return (f"{_ms(c.ns_per_step)} per step "
            f"({_pct(None if c.share_of_step is None else 100 * c.share_of_step)} of the step)")


def headline(biggest, top, waiting: list[int] | None, tcp: bool = False) -> str:
    """The run's answer in one sentence: the biggest material cause, its cost per step and the culprit."""
    if top is None:
        return "No communication in this run: nothing to overlap."
    if biggest is None:
        return (f"Communication is not what holds the steps up: the largest cause, {_CAUSE_WORDS[top.cause]}, "
                f"costs {_cost(top)}.")
    c = biggest
    if c.cause == "peer-wait":
        if c.culprit is None:
            return (f"Waiting for the last rank to arrive costs {_cost(c)}, and no single rank is the one waited "
                    "for.")
        others = [r for r in (waiting or []) if r != c.culprit.rank]
        who = (f"{ranks_label(others)} wait for it at their collectives" if len(others) > 1 else
               f"{ranks_label(others)} waits for it at its collectives" if others else
               "the other ranks wait for it at their collectives")
        why = ("for a reason the trace does not show" if c.culprit.reason == "unknown"
               else f"because of {_REASON_WORDS[c.culprit.reason]}")
        return f"Waiting for rank {c.culprit.rank} costs {_cost(c)}: {who}, and it arrives last {why}."
    if c.cause == "not-overlapped":
        shape = f", pattern {c.pattern}" if c.pattern else ""
        over = " over TCP sockets between nodes" if tcp else ""
        return f"Transfers that no compute hides cost {_cost(c)}{over}{shape}."
    return f"The overlap tax costs {_cost(c)}: compute runs slower beside communication."


_DIM_LEVER = {
    "fsdp": "prefetch the next all-gather (FSDP forward_prefetch / backward_prefetch)",
    "tp": "overlap the tensor-parallel collectives with their GEMMs (TransformerEngine userbuffers, Megatron "
          "--tp-comm-overlap)",
    "pp": "more micro-batches or an interleaved schedule shrink the pipeline bubble",
    "ep": "overlap the expert all-to-all dispatch and combine with expert compute (micro-batches that alternate)",
    "emb": "pipeline the embedding all-to-alls with the dense compute (TorchRec's TrainPipelineSparseDist)",
    "cp": "overlap the ring-attention send/recv with the attention of the previous chunk",
}


def lever(cause: str, culprit, pattern: str | None, dimension: str | None, tcp: bool, cpu: bool) -> str:
    """The one thing to try first against a cause of the run verdict."""
    if cause == "peer-wait":
        if culprit is None:
            return ("no single rank is last: look for work that is uneven between ranks and moves from step to "
                    "step (sequence lengths, batch composition, expert routing) or hosts that stall now and then")
        return f"rank {culprit.rank}: " + reason_advice(culprit.reason, cpu)
    if cause == "overlap-tax":
        return ("give the collectives fewer SMs (NCCL_MAX_CTAS) or move them to the copy engines (NCCL 2.28+ "
                "copy-engine collectives)")
    if tcp:
        return ("make NCCL use RDMA between the nodes: it runs over TCP sockets (see the network transport "
                "verdict for why)")
    if pattern == "serialized":
        return ("issue the collectives on their own stream (async_op=True, NCCL's internal stream), not the compute "
                "stream")
    if pattern == "backlog":
        return ("move fewer bytes or get more bandwidth: bf16/fp16 gradients or compression, fewer and larger "
                "messages, a faster transport")
    if dimension in _DIM_LEVER:
        return _DIM_LEVER[dimension]
    if dimension == "dp":
        if pattern == "two-phase":
            return ("start the gradient all-reduces during the backward: check bucket_cap_mb (one bucket larger than "
                    "the model) and no_sync with a final all-reduce")
        return "a smaller last DDP bucket (bucket_cap_mb) or earlier launches hide more of the transfers"
    return "launch the collectives earlier, while compute they do not depend on still runs"
