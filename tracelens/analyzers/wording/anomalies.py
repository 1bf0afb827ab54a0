"""Collective outliers (analyzers/run/crossrank/slow_instances.py): the slow instances a median hides."""

from __future__ import annotations

from .base import Finding, ms, noun, size

_CAUSES = {"wait": "waited for a late rank", "transfer": "transferred slowly on every rank",
           "early": "came early and waited for their peers (a shorter lead than usual: no time lost)",
           "unknown": "not matched across ranks (wait and transfer cannot be told apart)"}


def _kind(ev: dict) -> str:
    lo, hi = ev["bytes_min"], ev["bytes_max"]
    sized = "" if lo is None else f" of {size(lo)}" if lo == hi else f" of {size(lo)}-{size(hi)}"
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
    detail = (f"an instance is an outlier above {ms(ev['limit_ns'])} (its kind's median plus {ev['k']:g} robust "
              f"deviations, and at least {ms(ev['min_excess_ns'])} more); {causes}{late}. Their time over the "
              f"median: {ms(ev['excess_ns'])}, {ms(ev['exposed_excess_ns'])} of it exposed, "
              f"{ms(ev['cost_per_step_ns'])} per step over {ev['steps']} step{'s' if ev['steps'] != 1 else ''}. "
              f"Outliers, worst first: {listed}{more}")
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

SENTENCES = {
    ("outlier", "wait"): outlier,
    ("outlier", "transfer"): outlier,
    ("outlier", "early"): outlier,
    ("outlier", "unknown"): outlier,
}
