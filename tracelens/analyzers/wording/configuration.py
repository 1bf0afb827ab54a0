"""What the run's configuration does to its communication: the exposed time of each parallelism dimension
(analyzers/rank/dimensions.py), DDP's bucket size (analyzers/rank/wfbp.py) and a setting the trace
contradicts (analyzers/rank/settings.py)."""

from __future__ import annotations

from .base import NOUNS, Finding, ms, pct


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
             f"{pct(100 * ev['expected_bubble'])} of the step if it is plain 1F1B)")
        return (f"a 1F1B schedule idles ({size} − 1)(F + B) per step, ({size} − 1)/(m + {size} − 1) of it with m "
                f"micro-batches{expect}: more micro-batches, an interleaved schedule (virtual pipeline stages), or a "
                "zero-bubble / DualPipe schedule shrink it; the device was idle "
                f"{ms(ev['idle_ns'])} in these steps")
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
    ops = ", ".join(NOUNS.get(o, o) for o in ev["ops"]) or "communication"
    # A whole-trace window has no step number to point at, and one step is not "most exposed" of anything.
    worst = (f"; most exposed in step {ev['worst_step']}" if ev["worst_step"] is not None and ev["steps"] > 1
             else "")
    over = "over 1 step" if ev["steps"] == 1 else f"over {ev['steps']} steps"
    return (f"{_DIM_TITLE[ev['dimension']]} communication exposed: {ms(ev['exposed_comm_ns'])} "
            f"({pct(100 * ev['exposed_fraction'])} of step time)",
            f"{ev['collectives']} collective{'' if ev['collectives'] == 1 else 's'} ({ops}) in {groups}: "
            f"{ms(ev['comm_ns'])} of communication {over}, {pct(ev['overlap_pct'])} hidden{worst}",
            _dim_advice(ev))


def bucket_size(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    return (f"bucket size: bucket_cap_mb={ev['suggested_cap_mib']} would expose {ms(ev['suggested_exposed_ns'])} "
            f"of all-reduce per step instead of {ms(ev['observed_exposed_ns'])}",
            f"the WFBP model of step {ev['step']}'s {ev['buckets']} buckets (backward {ms(ev['backward_ns'])}, "
            f"each all-reduce {ms(ev['latency_ns'])} + its size at {ev['gbps']:.1f} GB/s) gives "
            f"{ms(ev['model_exposed_ns'])} exposed for the buckets as they are",
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


SENTENCES = {
    ("bucket-size", None): bucket_size,
    ("config-mismatch", None): config_mismatch,
    ("parallelism", "dp"): parallelism,
    ("parallelism", "fsdp"): parallelism,
    ("parallelism", "tp"): parallelism,
    ("parallelism", "pp"): parallelism,
    ("parallelism", "ep"): parallelism,
    ("parallelism", "emb"): parallelism,
    ("parallelism", "cp"): parallelism,
    ("parallelism", "unknown"): parallelism,
}
