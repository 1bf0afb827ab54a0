"""Memory copies that hold the step up (analyzers/rank/copies.py): by direction, with the levers of a PyTorch
or a plain CUDA program."""

from __future__ import annotations

from .base import Finding, ms, pct


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
    listed = ", ".join(f"{_COPY_WORDS.get(d, d)} {ms(v)}" for d, v in
                       sorted(parts.items(), key=lambda kv: -kv[1]) if v >= 5_000) or "each under 0.01 ms"
    return (f"memory copies fill {pct(100 * ev['copy_fraction'])} of the step",
            f"{ms(ev['exposed_copy_ns'])} of the {ms(ev['duration_ns'])} step ran nothing but copies and sets "
            f"({listed}); compute {ms(ev['compute_ns'])}, communication {ms(ev['comm_ns'])}",
            advice)


SENTENCES = {
    ("memcpy-bound", None): memcpy_bound,
}
