"""tracelens: is my communication hidden behind compute, and if not, why?

Library API (the CLI is a thin shell over it)::

    import tracelens
    report = tracelens.report("runs/ddp/")      # Report (schema tracelens.report/1)
    traces = tracelens.load("runs/ddp/")        # list[RankTrace]: per-rank numpy tables (.to_pandas())
    report = tracelens.analyze(traces)          # the same Report, from loaded traces
    print(report.to_json().decode())

Everything here is :mod:`tracelens.api` (load, analyze_rank, combine, report, thresholds, gate).

The names below are imported on first use, so ``import tracelens.collectors`` (which runs inside every
profiled worker process) does not pull in numpy.
"""

import importlib

from ._version import __version__

_LAZY = {
    "load": ("api", "load"),
    "analyze": ("api", "analyze"),
    "analyze_rank": ("api", "analyze_rank"),
    "combine": ("api", "combine"),
    "report": ("api", "report"),
    "gate": ("api", "gate"),
    "thresholds": ("api", "thresholds"),
    "context": ("api", "context"),
    "Thresholds": ("analyzers", "Thresholds"),
    "Report": ("contract", "Report"),
    "RankTrace": ("model", "RankTrace"),
    "TracelensError": ("errors", "TracelensError"),
    "InputError": ("errors", "InputError"),
    "UsageError": ("errors", "UsageError"),
}

__all__ = ["__version__", *_LAZY]


def __getattr__(name: str):
    if name == "api":                       # the module itself, for tracelens.api.gate(...) and friends
        return importlib.import_module(".api", __name__)
    if name in _LAZY:
        module, attr = _LAZY[name]
        value = getattr(importlib.import_module(f".{module}", __name__), attr)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'tracelens' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
