"""CI gates on overlap: rules evaluated per rank over a Report's steps (and a baseline's), nothing else.

The gate reads Reports (or the step rows the history database keeps of them); it never opens a trace.
Every rule aggregates each rank's complete steps into one number (median by default), so one bad rank
fails the rule and the outcome names it. The rules are written out in docs/ci.md.

- ``config``: GateConfig (the rules as configured, checked) and the TOML files that hold them;
- ``rules``: ``evaluate`` and every rule, ``Baseline``, ``step_frame``;
- ``result``: the outcome, ``GateResult`` (JSON contract ``tracelens.gate/1``).
"""

from __future__ import annotations

from .config import AGGREGATES, CONFIG_KEYS, PATTERNS, GateConfig, find_config, load_config, read_table
from .result import SCHEMA, GateResult, RankOutcome, RuleOutcome

_RULES = ("STEP_COLUMNS", "Baseline", "aggregate", "evaluate", "step_frame")

__all__ = ["AGGREGATES", "Baseline", "CONFIG_KEYS", "GateConfig", "GateResult", "PATTERNS", "RankOutcome",
           "RuleOutcome", "SCHEMA", "STEP_COLUMNS", "aggregate", "evaluate", "find_config", "load_config",
           "read_table", "step_frame"]


def __getattr__(name: str):
    if name in _RULES:
        from . import rules     # lazy: the rules need pandas; reading a config file (every report) must not

        return getattr(rules, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
