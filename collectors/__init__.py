"""Run a training job under torch.profiler or Nsight Systems and keep its traces (``tracelens collect``).

Imported as ``tracelens.collectors``; the collector itself is tracked in its own issue and is not part of
this release.
"""
