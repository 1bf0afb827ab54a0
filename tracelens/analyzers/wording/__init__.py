"""Every sentence of every finding: the title, detail and advice that a Diagnosis carries.

Analyzers decide a finding (its id, severity and, where an id has several sentences, its verdict) and
measure its evidence; this package only words it, one function per id and verdict, one module per family
of findings (each with its ``SENTENCES``, merged into :data:`WORDING` here; ``base`` holds what they share).
A function reads the finding's evidence (and its step) and formats it: it never measures, sums, picks a
maximum or compares against a threshold, so every number a sentence states is one of the evidence values as
printed (ms with three decimals and percentages with one decimal, as the report's tables print them;
docs/metrics.md, "Sentences"). It lives with the analyzers, not beside the renderers: a renderer shows the
texts a report already holds (a saved JSON report is re-rendered without its traces), so only
:func:`diagnosis` turns findings into report entries.
"""

from __future__ import annotations

from typing import Callable, Optional

from ...contract import Diagnosis
from . import anomalies, configuration, coverage, exposure, launching, memcopies, network, peers, slowdown, stalls
from .base import Finding, ranks_label
from .peers import headline, lever, logs_headline, reason_advice

__all__ = ["Finding", "WORDING", "diagnosis", "headline", "lever", "logs_headline", "ranks_label", "reason_advice"]

WORDING: dict[tuple[str, Optional[str]], Callable[[Finding], tuple[str, str, str]]] = {
    **exposure.SENTENCES, **stalls.SENTENCES, **launching.SENTENCES, **peers.SENTENCES, **coverage.SENTENCES,
    **memcopies.SENTENCES, **slowdown.SENTENCES, **network.SENTENCES, **configuration.SENTENCES,
    **anomalies.SENTENCES,
}
"""The sentences of every finding, by (id, verdict)."""


def diagnosis(f: Finding) -> Diagnosis:
    """The report entry of a finding: its sentences from :data:`WORDING`, everything else as found."""
    title, detail, advice = WORDING[f.id, f.verdict](f)
    if "peer_wait" in f.evidence:
        advice = peers.waiting_advice(f.evidence["peer_wait"])
    return Diagnosis(id=f.id, severity=f.severity, rank=f.rank, step=f.step, title=title, detail=detail,
                     advice=advice, evidence=f.evidence)
