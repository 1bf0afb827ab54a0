"""The overlap tax (analyzers/rank/tax.py): compute kernels that run slower beside communication than alone."""

from __future__ import annotations

from .base import NOUNS, Finding, kernel_name, ms, pct


_TAX_LEVERS = ("give the collectives fewer SMs (NCCL_MAX_CTAS, NCCL_NCHANNELS_PER_NET_PEER) or move them to the "
               "copy engines (NCCL 2.28+ copy-engine collectives, which use no SMs); fewer, larger buckets "
               "(bucket_cap_mb) overlap fewer kernels; CUDA_DEVICE_MAX_CONNECTIONS and a higher-priority "
               "compute stream decide which kernels the collectives share the GPU with")


def _taxed(k: dict) -> str:
    under = f" under {NOUNS.get(k['collective']) or kernel_name(k['collective'])}" if k["collective"] else ""
    return (f"{kernel_name(k['name'])} ran {ms(k['mean_ns'])} instead of {ms(k['baseline_ns'])} alone{under} "
            f"({k['runs']}× against {k['alone']} runs alone: {ms(k['shift_ns'])} slower, "
            f"{ms(k['shift_low_ns'])}-{ms(k['shift_high_ns'])}; {ms(k['tax_ns'])})")


def _left(k: dict) -> str:
    if k["reason"] == "varies":
        return (f"{kernel_name(k['name'])} ran {ms(k['alone_min_ns'])}-{ms(k['alone_max_ns'])} over its "
                f"{k['alone']} runs alone ({k['runs']}× under communication)")
    return (f"{kernel_name(k['name'])} ({k['alone']} run{'s' if k['alone'] != 1 else ''} alone, {k['runs']}× under "
            "communication)")


def overlap_tax(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    kernels = "; ".join(_taxed(k) for k in ev["kernels"])
    n, u, v = ev["compared"], ev["uncompared"], ev["varying"]
    left = []
    if u:
        left.append(f"{u} with too few runs alone to compare")
    if v:
        left.append(f"{v} whose work varies (runs alone spread over more than {pct(100 * ev['max_spread'])} "
                    "of their median, or without input shapes under communication)")
    out = f"; left out: {', '.join(left)}, e.g. {'; '.join(_left(k) for k in ev['left_out'])}" if left else ""
    return (f"overlap tax: compute ran {ms(ev['overlap_tax_ns'])} slower beside communication "
            f"({pct(100 * ev['tax_fraction'])} of step time; {pct(100 * ev['confidence'])} interval "
            f"{ms(ev['overlap_tax_low_ns'])}-{ms(ev['overlap_tax_high_ns'])})",
            f"{n} kernel{'s' if n != 1 else ''} under communication compared with their runs alone, "
            f"{ev['slowed']} of {ev['identities']} kernel identit{'y' if ev['identities'] == 1 else 'ies'} "
            f"slower beyond their spread: {kernels}; "
            f"hiding {ms(ev['overlap_ns'])} of communication cost {ms(ev['overlap_tax_ns'])} (at least "
            f"{ms(ev['overlap_tax_low_ns'])}), so it really costs {ms(ev['effective_exposed_ns'])} "
            f"({ms(ev['exposed_comm_ns'])} exposed + tax){out}",
            _TAX_LEVERS)


SENTENCES = {
    ("overlap-tax", None): overlap_tax,
}
