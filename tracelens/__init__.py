"""tracelens: is my communication hidden behind compute, and if not, why?

Library API (the CLI is a thin shell over it)::

    import tracelens
    traces = tracelens.load("runs/ddp/")        # list[RankTrace]: per-rank pandas tables
    report = tracelens.analyze(traces)          # Report (schema tracelens.report/1)
    print(report.to_json().decode())
"""

from ._version import __version__
from .analyzers import analyze
from .errors import InputError, TracelensError, UsageError
from .model import RankTrace
from .parsers import load
from .report import Report

__all__ = ["__version__", "analyze", "load", "Report", "RankTrace", "TracelensError", "InputError", "UsageError"]
