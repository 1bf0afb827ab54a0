"""Run a training job under torch.profiler or Nsight Systems and keep its traces (``tracelens collect``).

Imported as ``tracelens.collectors``. Inside a job started by ``tracelens collect``, the profiling schedule
advances on every optimizer step; a training loop without an optimizer calls :func:`step` once per
iteration instead (a no-op outside ``tracelens collect``, so the script runs unchanged without it)::

    import tracelens.collectors
    for batch in loader:
        ...
        tracelens.collectors.step()
"""

from __future__ import annotations

from .agent import step

__all__ = ["step"]
