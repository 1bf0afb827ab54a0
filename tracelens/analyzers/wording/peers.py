"""What ranks say about each other: the wait for a late rank (analyzers/run/verdict.py), stragglers and their
reason (analyzers/run/crossrank/straggler.py, run/slow_ranks.py), clock offsets (crossrank/clocks.py), and
the run verdict's headline and first lever, which name the same reasons."""

from __future__ import annotations

from .base import Finding, comm_label, hosts_label, ms, pct, ranks_label, size


def waiting_advice(pw: dict) -> str:
    """For a finding whose exposed time is mostly the wait for a late rank (analyzers/run/verdict.py)."""
    who = "the last rank to arrive at each collective" if pw["rank"] is None else f"rank {pw['rank']}"
    where = "exposed here" if pw.get("of", "step") == "step" else "this rank exposes in all"
    return (f"{ms(pw['wait_ns'])} of the {ms(pw['exposed_ns'])} {where} is waiting for {who}: no bucket, "
            "launch or stream change hides it; "
            + ("see the run verdict" if pw["rank"] is None else f"see the straggler finding of rank {pw['rank']}"))


def _straggler(f: Finding, what: str, excess: float) -> tuple[str, str, str]:
    ev = f.evidence
    step = f"median step {ms(ev['step_ns'])} against {ms(ev['ranks_step_ns'])}"
    compute = f"median compute {ms(ev['compute_ns'])} against {ms(ev['ranks_compute_ns'])}"
    first, second = (step, compute) if what == "step time" else (compute, step)
    return (f"straggler: {what} {pct(100 * excess)} above the median of {ev['ranks']} ranks",
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
                "shapes with the other ranks'; if it gets more work than they do, share the work out evenly") \
            if cpu else \
            ("compare its kernels, GPU clocks (power or thermal throttling) and data shapes with the other ranks'; "
             "if it gets more work than they do, share the work out evenly")
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
    if ev.get("from_logs"):
        return (f"straggler: the other ranks wait for it at {n} collective{'' if n == 1 else 's'}, "
                f"{ms(ev['caused_wait_ns'])} of waiting in all",
                f"it arrives last at {n} of {ev['instances']} matched collectives"
                + ("" if ev["mean_skew_ns"] is None else f", a mean {ms(ev['mean_skew_ns'])} after the first rank")
                + f", causing {pct(100 * ev['wait_share'])} of the waiting over {ev['ranks']} ranks; what it does "
                "before arriving is not in NCCL Inspector logs (no compute, no launches)",
                f"profile rank {f.rank} (a Kineto or nsys trace) to see what it does before its late collectives")
    if reason == "unknown":
        why = (f"at the one of each step they waited at longest it came a mean {ms(ev['lateness_ns'])} after "
               f"the other ranks, but since they last met (the "
               f"previous step's collective, else the step's start) it took a mean {ms(ev['lead_ns'])} to arrive "
               f"against {ms(ev['ranks_lead_ns'])} on the others, and no one activity explains the difference")
        if ev["late_start_ns"] is not None:
            why += (f"; it began its first captured step {ms(ev['late_start_ns'])} after the other ranks: look at "
                    "what it does between steps and before the capture")
    else:
        why = (f"before the one of each step they waited at longest it spent a mean "
               f"{ms(ev['lead_by_reason_ns'][reason])} {_REASON_DOING[reason]} "
               f"against {ms(ev['ranks_lead_by_reason_ns'][reason])} on the other ranks, of "
               f"{ms(ev['lead_ns'])} against {ms(ev['ranks_lead_ns'])} since they last met (the previous step's "
               "collective, else the step's start)")
    skew = "" if ev["mean_skew_ns"] is None else f", a mean {ms(ev['mean_skew_ns'])} after the first rank"
    return (f"straggler ({_REASON_WORDS[reason]}): the other ranks wait for it at {n} collective"
            f"{'' if n == 1 else 's'}, {ms(ev['caused_wait_ns'])} of waiting in all",
            f"it arrives last at {n} of {ev['instances']} matched collectives{skew}, causing "
            f"{pct(100 * ev['wait_share'])} of the waiting over {ev['ranks']} ranks; {why}",
            reason_advice(reason, ev["cpu"]))


def _offsets(units: list) -> str:
    def one(u):
        who = f"host {u['host']}" if u["host"] is not None else "rank " + ", ".join(map(str, u["ranks"]))
        off = "unknown (no collective shared)" if u["offset_ns"] is None else f"{u['offset_ns'] / 1e6:+.3f} ms"
        spread = "" if u["spread_ns"] is None else f" ± {ms(u['spread_ns'])}"
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
            f"{ms(ev['max_spread_ns'])}: {_offsets(ev['uncertain_units'])}; arrival skew and the last rank are not "
            "given for collectives of these ranks (waits and transfers do not need clocks)",
            "record every rank in one capture window, or synchronise the hosts' clocks (NTP, PTP)")



# ----------------------------------------------------------------------------------- run verdict

_CAUSE_WORDS = {"peer-wait": "waiting for other ranks", "not-overlapped": "transfers no compute hides",
                "overlap-tax": "the overlap tax"}


def _cost(c) -> str:
    """A cause's cost as the verdict words it, with the digits of every other time and share of the report
    (its table prints the same: renderers/run_tables.verdict_cells)."""
    return (f"{ms(c.ns_per_step)} per step "
            f"({pct(None if c.share_of_step is None else 100 * c.share_of_step)} of the step)")


def saving_words(c, step_ns: float | None) -> str:
    """What fixing a cause saves, as a person says it: "about 33.9 ms per step (27.4 % of the step)"."""
    share = pct(100 * c.saving_ns / step_ns) if step_ns else "n/a"
    return f"about {ms(c.saving_ns)} per step ({share} of the step)"


def logs_headline(culprit: int | None, caused_ns: int, slowest: tuple | None, link: dict | None = None,
                  matched: int = 1) -> str:
    """The answer of a run known from NCCL Inspector logs alone: the rank the others wait for and the waiting
    it causes, the slow link (``link``: the evidence of the slow-link finding that lost the most time), else
    the slowest transfers (op, the smallest and largest size they had, median busbw), and that overlap with
    compute is unknown without traces. ``matched``: the instances matched across ranks; with none, who waits
    for whom is unknown, not "no one"."""
    if not matched:
        who = "No collective was matched across ranks (the warnings say why): who waits for whom is unknown"
    elif culprit is not None:
        who = f"Rank {culprit} is the one the others wait for ({ms(caused_ns)} of waiting caused)"
    else:
        who = "No single rank is the one the others wait for"
    slow = ""
    if link is not None:
        slow = (f"; the slow link: {comm_label(link)} {hosts_label(link['hosts'])} at {link['busbw_gbps']:.2f} GB/s "
                f"busbw, {pct(100 * link['share'])} of its peers' ({ms(link['lost_ns'])} lost)")
    elif slowest is not None:
        op, smallest, largest, busbw = slowest
        sizes = size(smallest) if size(smallest) == size(largest) else f"{size(smallest)}–{size(largest)}"
        slow = f"; the slowest transfers: {op or 'collectives'} of {sizes} at {busbw:.1f} GB/s busbw"
    return (f"{who}{slow}. From NCCL Inspector logs alone: whether communication is hidden behind compute is "
            "unknown without traces.")


def headline(biggest, top, waiting: list[int] | None, tcp: bool = False, step_ns: float | None = None,
             also=None, cpu: bool = False, logs_alone: str | None = None, untraced: tuple = ()) -> str:
    """The run's answer in one sentence: the biggest material cause, what fixing it saves per step (its cost
    where the trace cannot tell what it saves), and the culprit; ``also``, a second cause as likely the
    bigger one (their intervals meet), named after it. ``logs_alone``: the network transport finding's title
    of a run given as NCCL logs and no trace, whose only answer that is; ``untraced``: the ranks known from
    NCCL Inspector logs only."""
    if top is None:
        if logs_alone:
            return (f"{logs_alone[0].upper()}{logs_alone[1:]} (NCCL logs alone: without a trace there is no "
                    "overlap to judge).")
        return "No communication in this run: nothing to overlap."
    if biggest is None:
        return (f"Communication is not what holds the steps up: the largest cause, {_CAUSE_WORDS[top.cause]}, "
                f"costs {_cost(top)}.")
    first = _clause(biggest, waiting, tcp, step_ns, cpu, untraced)
    if also is None:
        return first + "."
    return f"{first}; about as much: {_CAUSE_WORDS[also.cause]}, {_worth(also, step_ns)}."


def _worth(c, step_ns) -> str:
    return f"saving {saving_words(c, step_ns)} if fixed" if c.saving_ns is not None else f"costing {_cost(c)}"


def _clause(c, waiting, tcp: bool, step_ns, cpu: bool, untraced: tuple = ()) -> str:
    if c.cause == "peer-wait":
        if c.culprit is None:
            return (f"Waiting for the last rank to arrive costs {_cost(c)}, and no single rank is the one waited "
                    "for")
        others = [r for r in (waiting or []) if r != c.culprit.rank]
        who = (f"{ranks_label(others)} wait for it at their collectives" if len(others) > 1 else
               f"{ranks_label(others)} waits for it at its collectives" if others else
               "the other ranks wait for it at their collectives")
        why = ("for a reason only a trace of it would show (its NCCL Inspector log holds no compute)"
               if c.culprit.rank in untraced else "for a reason the trace does not show"
               if c.culprit.reason == "unknown" else f"because of {_REASON_WORDS[c.culprit.reason]}")
        if c.saving_ns is None:
            return f"Waiting for rank {c.culprit.rank} costs {_cost(c)}: {who}, and it arrives last {why}"
        return (f"Rank {c.culprit.rank} arrives last {why}: {who}, and its coming on time would save "
                f"{saving_words(c, step_ns)}")
    if c.cause == "not-overlapped":
        shape = f", pattern {c.pattern}" if c.pattern else ""
        over = " over TCP sockets between nodes" if tcp else ""
        if c.saving_ns is None:
            hidden = " (on CPU ranks hiding them may save nothing: they run on the cores the compute uses)" \
                if cpu else ""
            return f"Transfers that no compute hides take {_cost(c)}{over}{shape}{hidden}"
        if ms(c.saving_ns) == ms(c.ns_per_step):        # hiding them all saves all they cost
            return f"Transfers that no compute hides cost {_cost(c)}{over}{shape}"
        return (f"Transfers that no compute hides take {_cost(c)}{over}{shape}; hiding them would save "
                f"{saving_words(c, step_ns)}")
    return f"The overlap tax costs {_cost(c)}: compute runs slower beside communication"


_DIM_LEVER = {
    "fsdp": "prefetch the next all-gather (FSDP forward_prefetch / backward_prefetch)",
    "tp": "overlap the tensor-parallel collectives with their GEMMs (TransformerEngine userbuffers, Megatron "
          "--tp-comm-overlap)",
    "pp": "more micro-batches or an interleaved schedule shrink the pipeline bubble",
    "ep": "overlap the expert all-to-all dispatch and combine with expert compute (micro-batches that alternate)",
    "emb": "pipeline the embedding all-to-alls with the dense compute (TorchRec's TrainPipelineSparseDist)",
    "cp": "overlap the ring-attention send/recv with the attention of the previous chunk",
}


def lever(cause: str, culprit, pattern: str | None, dimension: str | None, tcp: bool, cpu: bool,
          untraced: tuple = ()) -> str:
    """The one thing to try first against a cause of the run verdict (``untraced``: the ranks known from NCCL
    Inspector logs only)."""
    if cause == "peer-wait":
        if culprit is None:
            return ("no single rank is last: look for work that is uneven between ranks and moves from step to "
                    "step (sequence lengths, batch composition, expert routing) or hosts that stall now and then")
        if culprit.rank in untraced:
            return (f"rank {culprit.rank}: profile it too (a Kineto or nsys trace) to see what it does before its "
                    "late collectives")
        return f"rank {culprit.rank}: " + reason_advice(culprit.reason, cpu)
    if cause == "overlap-tax":
        return ("give the collectives fewer SMs (NCCL_MAX_CTAS) or move them to the copy engines (NCCL 2.28+ "
                "copy-engine collectives)")
    if tcp:
        return ("make NCCL use RDMA between the nodes: it runs over TCP sockets (see the network transport "
                "verdict for why)")
    if cpu:
        # Re-runs of a gloo job at every bucket size and with no_sync left its step time where it was
        # (bench/RESULTS.md, "Predictions against re-runs"): overlap settings are no lever here.
        return ("none that overlap settings give on CPU ranks: the transfers share the compute's cores, and no "
                "bucket size or no_sync changed the step time of a re-run; on GPUs (NCCL) they act")
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


SENTENCES = {
    ("straggler", "step-time"): straggler_step_time,
    ("straggler", "compute-time"): straggler_compute_time,
    ("straggler", "compute"): _straggler_late,
    ("straggler", "host-gap"): _straggler_late,
    ("straggler", "sync-stall"): _straggler_late,
    ("straggler", "late-launch"): _straggler_late,
    ("straggler", "unknown"): _straggler_late,
    ("clock-offset", "corrected"): clock_offset_corrected,
    ("clock-offset", "uncertain"): clock_offset_uncertain,
}
