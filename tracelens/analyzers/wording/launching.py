"""Launch order (analyzers/rank/launch_order.py): comm kernels queued behind compute launched after them, or
launched after the compute they could have hidden behind."""

from __future__ import annotations

from .base import Finding, kernel_name, ms


def launch_order(f: Finding) -> tuple[str, str, str]:
    ev = f.evidence
    connections, queued, late = ev["cuda_device_max_connections"], ev["queued"], ev["late"]
    setting = f"CUDA_DEVICE_MAX_CONNECTIONS={connections} in this run" if connections is not None \
        else "CUDA_DEVICE_MAX_CONNECTIONS was not recorded"
    parts, advice, kinds = [], [], []
    if queued:
        worst = ev["collectives"][queued["worst"]]
        kinds.append("queued behind later-launched compute")
        parts.append(f"{queued['count']} comm kernel(s) waited {ms(queued['delay_ns'])} behind compute "
                     f"launched after them (worst: {kernel_name(worst['name'])} behind "
                     f"{kernel_name(worst['kernels'][0])}, {ms(worst['delay_ns'])})")
        advice.append("set CUDA_DEVICE_MAX_CONNECTIONS=1 so kernels start in launch order"
                      if connections != "1" else
                      "kernels already start in launch order here: check what the collective waits on")
    if late:
        worst = ev["collectives"][late["worst"]]
        kinds.append("launched too late")
        parts.append(f"{late['count']} comm kernel(s) were launched {ms(late['delay_ns'])} after compute "
                     f"they could have overlapped had started (worst: {kernel_name(worst['name'])} launched "
                     f"{ms(worst['delay_ns'])} into {kernel_name(worst['kernels'][0])})")
        advice.append(f"launch the collective before {kernel_name(worst['kernels'][0])} (issue it as soon as its "
                      "input is ready)")
    return (f"launch order: exposed communication {' and '.join(kinds)}",
            "; ".join(parts) + f"; up to {ms(ev['hideable_ns'])} could be hidden ({setting})", "; ".join(advice))


SENTENCES = {
    ("launch-order", None): launch_order,
}
