"""The model layer: what the parsers, the analyzers and the collector hand each other, below all of them.

- ``rank_trace``: :class:`RankTrace`, one rank's tables (device_ops, host_ops, collectives, steps, threads)
  and what each column holds; ``table``: :class:`Table` (named numpy columns) and :class:`Labels`
  (categorical columns as codes into their names); ``meta``: :class:`RunMeta`, what a parser learns about a
  trace besides its tables, and its warnings.
- ``columns``, ``classify``, ``linking``: the helpers parsers and analyzers share over those columns
  (categorical columns read once per distinct name; kernel classification; host/device linking).
- ``nccl_records``: what an NCCL debug log says, as records; ``step_timeline``: :class:`StepTimeline`, the
  lanes of one rank and step, built by an analyzer and drawn by a renderer.
- ``rundir_layout`` and ``envlist``: the names inside a run directory and the environment variables
  recorded, shared by the collector (which writes them) and the parsers (which read them).

Nothing here imports the rest of tracelens. The names below are imported on first use: the collector
agent, which runs inside every profiled process, reads ``rundir_layout`` without numpy.
"""

from .._speed import lazy_exports

_NAMES = {
    "rank_trace": ("RankTrace", "ModelError", "empty_table", "KINDS", "DEVICE_COLUMNS", "HOST_COLUMNS",
                   "COLLECTIVE_COLUMNS", "STEP_COLUMNS", "THREAD_COLUMNS"),
    "table": ("Table", "Labels"),
    "meta": ("RunMeta",),
    "step_timeline": ("StepTimeline", "Lane"),
    "nccl_records": ("NcclInputs",),
}
__all__ = [name for names in _NAMES.values() for name in names]

__getattr__, __dir__ = lazy_exports(__name__, {name: module for module, names in _NAMES.items() for name in names})
