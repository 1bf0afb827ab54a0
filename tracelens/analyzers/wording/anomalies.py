"""Collective outliers (analyzers/run/crossrank/slow_instances.py): the slow instances a median hides."""

from __future__ import annotations

from .base import Finding, ms, noun, pct, sizes_label

_CAUSES = {"wait": "waited for a late rank", "transfer": "transferred slowly on every rank",
           "early": "came early and waited for their peers (a shorter lead than usual: no time lost)",
           "unknown": "not matched across ranks (wait and transfer cannot be told apart)"}


def _kind(ev: dict) -> str:
    lo, hi = ev["bytes_min"], ev["bytes_max"]
    sized = "" if lo is None else f" of {sizes_label(lo, hi)}"
    group = f" in group {ev['pg']}" if ev["pg"] is not None else ""
    return f"{noun(ev['op'], ev['instances'], 'gpu')}{sized}{group}"


def _where(x: dict) -> str:
    return f"rank {x['rank']}" + (f", step {x['step']}" if x["step"] is not None else "")


def _instance(x: dict) -> str:
    split = ""
    if x["wait_ns"] is not None:
        split = f": waited {ms(x['wait_ns'])}, transfer {ms(x['transfer_ns'])}"
    if x["cause"] == "early":
        split = f": came after {ms(x['lead_ns'])} instead of the usual {ms(x['usual_lead_ns'])}"
    late = " (the rank the others waited for)" if x["late_rank"] else ""
    return f"{_where(x)}{late} {ms(x['duration_ns'])}, {ms(x['excess_ns'])} over{split}"


def outlier(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    w = ev["worst"]
    causes = "; ".join(f"{n} {_CAUSES[c]}" for c, n in ev["causes"].items())
    late = ""
    if ev["late_ranks"]:
        late = " (late: " + ", ".join(f"rank {r} in {n}" for r, n in ev["late_ranks"].items()) + ")"
    listed = "; ".join(_instance(x) for x in ev["listed"])
    more = f"; and {ev['outliers'] - len(ev['listed'])} more" if ev["outliers"] > len(ev["listed"]) else ""
    title = (f"{ev['outliers']} of {ev['instances']} {_kind(ev)} took far longer than their median "
             f"{ms(ev['median_ns'])}: worst {ms(w['duration_ns'])} at {_where(w)}")
    exposed = (f"{ms(ev['exposed_excess_ns'])} of it exposed, {ms(ev['cost_per_step_ns'])} per step over "
               f"{ev['steps']} step{'s' if ev['steps'] != 1 else ''}" if ev.get("exposed_excess_ns") is not None
               else "how much of it was exposed is unknown (no trace of compute)")
    detail = (f"an instance is an outlier above {ms(ev['limit_ns'])} (its kind's median plus {ev['k']:g} robust "
              f"deviations, and at least {ms(ev['min_excess_ns'])} more); {causes}{late}. Their time over the "
              f"median: {ms(ev['excess_ns'])}, {exposed}. Outliers, worst first: {listed}{more}")
    return title, detail, _ADVICE[f.verdict](w)


_ADVICE = {
    "wait": lambda w: (f"open rank {w['rank']}" + (f" at step {w['step']}" if w["step"] is not None else "")
                       + " in the timeline: what it did before this collective made it late (a garbage-collection "
                       "pause, a data-loader stall, a host sync, a page fault); the others only waited"),
    "transfer": lambda w: ("the transfer itself was slow on every member: a slow or shared link, network "
                           "congestion or another job on the hosts; compare these instances' bus bandwidth with the "
                           "others' in the cross-rank table, and check the network transport NCCL used"),
    "early": lambda w: "",
    "unknown": lambda w: ("report this rank's peers with it (their traces matched with this one) to tell a wait "
                          "for a late rank from a slow transfer"),
}

_QUANTITY = {"exposed_comm_ns": "exposed communication", "duration_ns": "step time"}
_PARTS = (("duration_ns", "step time"), ("exposed_comm_ns", "exposed communication"), ("compute_ns", "compute"),
          ("wait_ns", "wait for peers"))


def drift(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    title = (f"{_QUANTITY[ev['quantity']]} {ev['direction']} from {ms(ev['first_ns'])} to {ms(ev['last_ns'])} per step over "
             f"steps {ev['first_step']}–{ev['last_step']} ({pct(100 * abs(ev['change']))} of its median)")
    parts = "; ".join(f"{name} {ms(ev[k]['first_ns'])} → {ms(ev[k]['last_ns'])}" for k, name in _PARTS
                      if ev[k] is not None and k != ev["quantity"])
    named = ", ".join(f"rank {x['rank']} ({pct(100 * x['change'])})" for x in ev["listed_ranks"])
    ranks = (f" {ev['drifting_ranks']} of {ev['ranks']} ranks drift as much on their own"
             + (f": {named}" if named else "") + "." if ev["ranks"] > 1 else "")
    inferred = " The steps were inferred from the repeating device work." if ev["inferred"] else ""
    detail = (f"per step the median over {ev['ranks']} rank{'s' if ev['ranks'] != 1 else ''}, the first and last "
              f"{ev['tenth']} steps compared (medians {ms(ev['first_ns'])} and {ms(ev['last_ns'])}, median of all "
              f"{ms(ev['median_ns'])}); Theil-Sen slope {ms(int(round(ev['slope_ns'])))} per step, "
              f"{pct(100 * ev['confidence'])} confidence of a monotonic trend (Kendall). First to last tenth: "
              f"{parts}.{ranks}{inferred} {_DRIVER[ev['driver']]}")
    if ev["culprit"] is not None:
        return title, detail, (f"rank {ev['culprit']} (the rank the others wait for) slowed as the run went on and "
                               f"the others waited for it more: what grows on rank {ev['culprit']} (its data "
                               "loader, memory, thermals) is the lever")
    return title, detail, _DRIFT_ADVICE.get((f.verdict, ev["driver"]), "")


_DRIVER = {"wait": "Most of the change is the wait for peers.",
           "transfer": "Most of the change is not the wait for peers: the communication itself took longer.",
           "compute": "Most of the change is compute: it is not communication's.",
           "exposed-comm": "Most of the change is exposed communication.",
           "unsplit": "One rank's own numbers cannot tell the wait for peers from the transfer.",
           "unknown": "No one part (compute, exposed communication, the wait for peers) carries half of it."}
_SPLIT = {**_DRIVER, "unknown": "Neither the wait for peers nor the transfer carries half of it."}
_DRIFT_ADVICE = {
    ("exposed-comm", "wait"): ("a rank slowed as the run went on and the others waited for it more (the stragglers "
                               "and the verdict's culprit say which): what grows on that rank (its data loader, "
                               "memory, thermals) is the lever"),
    ("exposed-comm", "transfer"): ("the network or a link slowed over the run (congestion from other jobs, a "
                                   "degrading link): compare the bus bandwidth of the first and last steps' "
                                   "collectives in the across-ranks view"),
    ("exposed-comm", "unsplit"): ("report the other ranks with this one to tell a growing wait for peers from a "
                                  "slowing transfer"),
}

def drift_collectives(f: Finding) -> tuple[str, str, str]:
    """Drift over a kind of collective's instances, where there are no steps (NCCL Inspector logs alone)."""
    ev = f.evidence
    kind = _kind({"op": ev["op"], "instances": ev["instances"], "bytes_min": ev["bytes"], "bytes_max": ev["bytes"],
                  "pg": ev["pg"]})
    title = (f"{ev['instances']} {kind} took {'longer' if ev['direction'] == 'grew' else 'less time'} as the run went "
             f"on: {ms(ev['first_ns'])} → {ms(ev['last_ns'])} a member ({pct(100 * abs(ev['change']))} of their median)")
    bw = ""
    if ev["first_busbw_gbps"] is not None and ev["last_busbw_gbps"] is not None:
        bw = f"; bus bandwidth {ev['first_busbw_gbps']:.1f} → {ev['last_busbw_gbps']:.1f} GB/s"
    detail = (f"per instance, in order, the time a member spent in it on average (the members' summed wait over "
              f"{ev['members']} members, plus the transfer); the first and last {ev['tenth']} instances compared (medians "
              f"{ms(ev['first_ns'])} and {ms(ev['last_ns'])}, median of all {ms(ev['median_ns'])}); Theil-Sen slope "
              f"{ms(int(round(ev['slope_ns'])))} per instance, {pct(100 * ev['confidence'])} confidence of a "
              f"monotonic trend (Kendall). First to last tenth: wait for peers {ms(ev['wait_ns']['first_ns'])} → "
              f"{ms(ev['wait_ns']['last_ns'])}, transfer {ms(ev['transfer_ns']['first_ns'])} → "
              f"{ms(ev['transfer_ns']['last_ns'])}{bw}. {_SPLIT[ev['driver']]} The logs hold no compute: whether "
              "this time was hidden behind it is unknown.")
    if ev["culprit"] is not None:
        return title, detail, (f"rank {ev['culprit']} came later and later to these collectives and the others waited "
                               f"for it: what grows on rank {ev['culprit']} before them (its data loader, memory, "
                               "thermals) is the lever; the logs do not say what it did, a trace of that rank does")
    if ev["driver"] == "transfer":
        return title, detail, ("the transfers themselves slowed over the run (a degrading link, congestion from other "
                               "jobs, a link shared more and more): check the links between these members' hosts and "
                               "the network transport NCCL used")
    return title, detail, ""


SENTENCES = {
    ("drift", "collective-time"): drift_collectives,
    ("drift", "exposed-comm"): drift,
    ("drift", "step-time"): drift,
    ("outlier", "wait"): outlier,
    ("outlier", "transfer"): outlier,
    ("outlier", "early"): outlier,
    ("outlier", "unknown"): outlier,
}
