"""What fixing the overlap would buy (docs/metrics.md, "What perfect overlap would buy").

A step's time with its communication perfectly hidden is ``max(duration − (exposed − exposed wait) − tax,
compute)``: the exposed transfers gone, and the compute they slowed while overlapped (the overlap tax) back at
full speed, but never shorter than the compute itself. The exposed wait for a late rank (``exposed_wait_ns``,
known once ranks are matched in ``combine``) stays: no overlap hides it, only the ranks arriving together.
Shared by the rank analyzers (before ranks meet) and ``combine`` (after), so it imports nothing heavy.
"""

from __future__ import annotations

from ..contract import StepMetrics


def perfect_overlap_ns(step: StepMetrics) -> int:
    """The step time with communication perfectly hidden."""
    hideable = step.exposed_comm_ns - (step.exposed_wait_ns or 0)
    return max(step.duration_ns - hideable - step.overlap_tax_ns, step.compute_ns)
