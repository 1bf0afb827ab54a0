"""What the trace does not show as communication: a trace with no device activity at all
(analyzers/rank/__init__.py), and collectives whose device work is hidden or counted as compute
(analyzers/rank/hidden_comm.py)."""

from __future__ import annotations

from .base import Finding, kernel_name, ms


def no_gpu_activity(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    calls, gpus = ev["nccl_calls"], ev["gpus_listed"]
    listed = f", and lists {gpus} GPU{'s' if gpus != 1 else ''}" if gpus else ""
    return ("no GPU activity recorded: the profiler recorded the CPU only",
            f"the trace has {calls} NCCL call{'s' if calls != 1 else ''} on the CPU{listed}, but no kernel, "
            "copy or sync on any GPU: communication and its overlap cannot be measured",
            "profile with activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA] in torch.profiler.profile "
            "(tracelens collect does), or nsys profile -t cuda,nvtx")



def _runs(items: list[dict]) -> str:
    """``flux::gemm_rs_kernel (compute, 8×, 3.20 ms)``: device work by name."""
    return ", ".join(f"{k['name'] if k['kind'] in ('memcpy', 'memset') else kernel_name(k['name'])} ({k['kind']}, "
                     f"{k['count']}×, {ms(k['time_ns'])})" for k in items)


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
            f"{_runs(ev['look_alike'])} ran as compute ({ms(ev['look_alike_ns'])} in all) in a run that "
            f"communicates ({why}; {ms(ev['comm_ns'])} classified as communication)",
            _hidden_advice(ev))


SENTENCES = {
    ("no-gpu-activity", None): no_gpu_activity,
    ("hidden-comm", "no-comm-kernel"): hidden_no_comm_kernel,
    ("hidden-comm", "look-alike"): hidden_look_alike,
}
