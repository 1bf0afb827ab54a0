"""What fixing the overlap would buy (docs/metrics.md, "What perfect overlap would buy").

A step's time with its communication perfectly hidden is ``max(duration − exposed − tax, compute)``: the
exposed communication gone, and the compute it slowed while overlapped (the overlap tax) back at full speed,
but never shorter than the compute itself.
"""

from __future__ import annotations

from ...contract import StepMetrics


def overlap_tax_ns(step: StepMetrics) -> int:
    """The step's overlap tax. MERGE POINT: the overlap-tax analysis (issue 23 part 1) adds
    ``StepMetrics.overlap_tax_ns``; until then no step has one and the tax is 0."""
    return getattr(step, "overlap_tax_ns", None) or 0


def perfect_overlap_ns(step: StepMetrics) -> int:
    """The step time with communication perfectly hidden."""
    return max(step.duration_ns - step.exposed_comm_ns - overlap_tax_ns(step), step.compute_ns)
