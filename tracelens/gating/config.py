"""The gate's rules as configured: GateConfig (flags and config files merged, checked), and the TOML files
that hold them (``tracelens.toml`` or the ``[tool.tracelens]`` tables of ``pyproject.toml``).

Nothing heavy is imported here: reading a config needs no numpy or pandas.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Optional

from ..errors import UsageError

AGGREGATES = ("median", "mean", "p90", "worst")
PATTERNS = ("sawtooth", "two-phase", "backlog", "serialized", "partial", "no-comm", "mixed")


@dataclass(frozen=True)
class GateConfig:
    """The rules and how to apply them. ``None`` leaves a rule out."""

    min_overlap_pct: Optional[float] = None
    max_exposed_fraction: Optional[float] = None
    max_exposed_ms: Optional[float] = None
    no_critical: bool = False
    require_pattern: tuple[str, ...] = ()
    max_overlap_drop: Optional[float] = None
    max_exposed_rise: Optional[float] = None
    aggregate: str = "median"
    baseline: Optional[str] = None
    history: Optional[str] = None
    against: Optional[str] = None

    @property
    def absolute_rules(self) -> bool:
        return any(_given(v) for v in (self.min_overlap_pct, self.max_exposed_fraction, self.max_exposed_ms,
                                       self.no_critical, self.require_pattern))

    @property
    def relative_rules(self) -> bool:
        return self.max_overlap_drop is not None or self.max_exposed_rise is not None

    def merged(self, overrides: dict) -> "GateConfig":
        """This config with every non-empty value of ``overrides`` (CLI flags) taking precedence."""
        return replace(self, **{k: v for k, v in overrides.items() if _given(v)})

    def check(self, where: str = "gate") -> "GateConfig":
        """Raise UsageError (exit 2) for values no rule can use; returns self."""
        def bad(key: str, why: str) -> UsageError:
            return UsageError(f"{key.replace('_', '-')}: {why}", path=where)

        for key, lo, hi in (("min_overlap_pct", 0, 100), ("max_exposed_fraction", 0, 1), ("max_exposed_ms", 0, None),
                            ("max_overlap_drop", 0, 100), ("max_exposed_rise", 0, 1)):
            v = getattr(self, key)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v):
                raise bad(key, f"expected a number, got {v!r}")
            if v < lo or (hi is not None and v > hi):
                raise bad(key, f"{v} is outside [{lo}, {'∞' if hi is None else hi}]")
        if not isinstance(self.no_critical, bool):
            raise bad("no_critical", f"expected true or false, got {self.no_critical!r}")
        for p in self.require_pattern:
            if p not in PATTERNS:
                raise bad("require_pattern", f"unknown pattern {p!r}; choose from {', '.join(PATTERNS)}")
        if self.aggregate not in AGGREGATES:
            raise bad("aggregate", f"unknown aggregate {self.aggregate!r}; choose from {', '.join(AGGREGATES)}")
        if self.baseline and self.history:
            raise bad("baseline", "give either a baseline report or a history database, not both")
        if self.history and not self.against:
            raise bad("against", "--history needs --against LABEL (the label of the run to compare with)")
        if self.against and not self.history:
            raise bad("history", "--against needs --history DB")
        if self.relative_rules and not (self.baseline or self.history):
            raise bad("max_overlap_drop" if self.max_overlap_drop is not None else "max_exposed_rise",
                      "a relative rule needs --baseline REPORT or --history DB --against LABEL")
        if (self.baseline or self.history) and not self.relative_rules:
            raise bad("baseline", "a baseline is given but no relative rule (--max-overlap-drop, "
                                  "--max-exposed-rise) uses it")
        if not (self.absolute_rules or self.relative_rules):
            raise UsageError("no gate rules given (for example --min-overlap-pct 80); see docs/ci.md")
        return self


CONFIG_KEYS = tuple(f.name for f in fields(GateConfig))


def _given(value) -> bool:
    """Whether a rule's value asks for something. Not ``value not in (None, False, ())``: 0 == False, and a
    limit of 0 (``--min-overlap-pct 0``, ``--max-exposed-rise 0``) is a rule."""
    return value is not None and value is not False and value != ()


def find_config(start: Path | None = None) -> Path | None:
    """The nearest ``tracelens.toml``, or ``pyproject.toml`` with a ``[tool.tracelens.gate]`` table, from
    ``start`` (the working directory) up to the filesystem root."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        own = folder / "tracelens.toml"
        if own.is_file():
            return own
        project = folder / "pyproject.toml"
        if project.is_file() and _tool_table(project) is not None:
            return project
    return None


def load_config(path: Path) -> GateConfig:
    """Read the gate table of a config file. Paths in it are relative to the file's folder."""
    table = read_table(path, "gate")
    section = "[tool.tracelens.gate]" if path.name == "pyproject.toml" else "[gate]"
    values: dict = {}
    for raw_key, value in table.items():
        key = raw_key.replace("-", "_")
        if key not in CONFIG_KEYS:
            known = ", ".join(k.replace("_", "-") for k in CONFIG_KEYS)
            raise UsageError(f"{section}: unknown key {raw_key!r} (known: {known})", path=str(path))
        if key == "require_pattern":
            value = (value,) if isinstance(value, str) else tuple(value) if isinstance(value, list) else value
        if key in ("baseline", "history") and isinstance(value, str):
            value = str((path.parent / value))
        if isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        values[key] = value
    config = GateConfig(**values)
    for key in ("aggregate", "baseline", "history", "against"):
        v = getattr(config, key)
        if v is not None and not isinstance(v, str):
            raise UsageError(f"{section}: {key.replace('_', '-')}: expected a string, got {v!r}", path=str(path))
    if not isinstance(config.require_pattern, tuple) or not all(isinstance(p, str) for p in config.require_pattern):
        raise UsageError(f"{section}: require-pattern: expected a pattern name or a list of them", path=str(path))
    return config


def read_table(path: Path, name: str) -> dict:
    """The ``[name]`` table of a tracelens.toml, or ``[tool.tracelens.name]`` of a pyproject.toml ({} when
    absent); anything but a table is a usage error."""
    if path.name == "pyproject.toml":
        doc, section = _tool_table(path) or {}, f"[tool.tracelens.{name}]"
    else:
        doc, section = _read_toml(path), f"[{name}]"
    table = doc.get(name, {})
    if not isinstance(table, dict):
        raise UsageError(f"{section} must be a table", path=str(path))
    return table


def _tool_table(path: Path) -> dict | None:
    """``[tool.tracelens]`` of a pyproject.toml (None when absent). ``tool = 5`` or ``tool.tracelens = 5`` is
    a usage error naming the file, not a traceback."""
    tool = _read_toml(path).get("tool", {})
    if not isinstance(tool, dict):
        raise UsageError("[tool] must be a table", path=str(path))
    own = tool.get("tracelens")
    if own is not None and not isinstance(own, dict):
        raise UsageError("[tool.tracelens] must be a table", path=str(path))
    return own


def _read_toml(path: Path) -> dict:
    if sys.version_info >= (3, 11):
        import tomllib          # lazy: most reports find no config file to read
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib  # lazy: most reports find no config file to read
    try:
        with open(path, "rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"not valid TOML: {exc}", path=str(path)) from None
    except UnicodeDecodeError:
        raise UsageError("not valid TOML: not UTF-8 text", path=str(path)) from None
    except OSError as exc:
        raise UsageError(f"cannot read config: {exc.strerror or exc}", path=str(path)) from None
