"""What a report is asked for, as one value.

Built once, where the request comes in (the CLI's flags, or :func:`tracelens.api.report`'s keywords), and
handed down as it is: to the executors, to every worker (pickled once), into the warm cache's keys. One name
per option inside: ``step_pattern`` is what the CLI's ``--step-nvtx`` and the api's ``step_nvtx`` give.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .errors import UsageError

EXECUTORS = ("local", "dask")
STEPS_FROM = ("auto", "markers", "inferred", "whole")


@dataclass(frozen=True)
class ReportOptions:
    """``comm_patterns``: extra regexes naming communication kernels; ``step_pattern``: a regex naming the
    step ranges instead of ``ProfilerStep#N``; ``thresholds``: a Thresholds, or ``NAME=VALUE`` flags laid
    over the config file (``use_config``, ``config``) and ``TRACELENS_THRESHOLDS``; ``cache``: read and fill
    the warm cache (None: on unless ``TRACELENS_NO_CACHE`` is set); ``steps_from``: where a rank's steps come
    from (docs/metrics.md, "Steps"): ``auto`` (the markers, else steps inferred from the device work, else the
    whole capture), ``markers``, ``inferred`` or ``whole``; ``jobs``: local worker processes (None:
    decide, :func:`tracelens.pool.plan`); ``executor``: ``local`` or ``dask`` (``workers`` on a LocalCluster,
    or the cluster at ``scheduler``)."""

    comm_patterns: tuple[str, ...] = ()
    step_pattern: str | None = None
    steps_from: str = "auto"
    thresholds: Any = None
    config: str | None = None
    use_config: bool = False
    cache: bool | None = None
    jobs: int | None = None
    executor: str = "local"
    workers: int | None = None
    scheduler: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "comm_patterns", tuple(self.comm_patterns))
        if self.executor not in EXECUTORS:
            raise UsageError(f"unknown executor {self.executor!r} (one of: {', '.join(EXECUTORS)})")
        if self.steps_from not in STEPS_FROM:
            raise UsageError(f"unknown steps_from {self.steps_from!r} (one of: {', '.join(STEPS_FROM)})")

    def resolved(self, cache: bool) -> ReportOptions:
        """The same options with the cache's switch settled (the environment read once, here)."""
        return replace(self, cache=cache)
