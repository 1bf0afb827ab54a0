"""Host syncs (analyzers/rank/syncs.py): the costliest call site, what it cost the device, and what to try for
that call in a PyTorch or a plain CUDA program."""

from __future__ import annotations

import re

from .base import NOUNS, Finding, ms


def _sync_detail(f: Finding) -> str:
    ev = f.evidence
    top = ev["sites"][0]
    per = " in this step" if f.step is not None else ""
    comm = f"; {ms(top['comm_in_flight_ns'])} of communication was in flight" if top["comm_in_flight_ns"] else ""
    detail = (f"{top['calls']}×{per}: the device idled {ms(top['idle_caused_ns'])} because of it; CPU blocked "
              f"{ms(top['blocked_ns'])}, device idle {ms(top['idle_after_ns'])} after it{comm}")
    if len(ev["sites"]) > 1:
        detail += (f" ({ev['calls']} syncs from {len(ev['sites'])} call sites{per}: "
                   f"{ms(ev['idle_caused_ns'])} device idle caused, {ms(ev['blocked_ns'])} blocked)")
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
        return (f"the host reads this value to size the {NOUNS.get(feeds, feeds)} that follows (its split sizes), "
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


SENTENCES = {
    ("sync-stall", "stall"): sync_stall,
    ("sync-stall", "end-of-step"): sync_at_end_of_step,
    ("sync-stall", "host-wait"): host_wait,
    ("sync-stall", "brief"): brief_syncs,
}
