"""What a gate decided: per rule and per rank, as the JSON contract ``tracelens.gate/1`` (keys may be added,
never change meaning) that the gate renderers and CI read."""

from __future__ import annotations

from typing import Optional, Union

import msgspec

SCHEMA = "tracelens.gate/1"


class RankOutcome(msgspec.Struct, kw_only=True):
    rank: int
    status: str                                  # pass | fail | skip
    value: Union[float, str, None]               # the rank's aggregate (or pattern, or critical count)
    baseline: Optional[float] = None             # the baseline's aggregate (relative rules)
    worst_step: Optional[int] = None             # the step with the worst value on this rank
    message: str = ""


class RuleOutcome(msgspec.Struct, kw_only=True):
    rule: str                                    # the flag / config key, e.g. min-overlap-pct
    description: str
    limit: Union[float, str, bool]
    status: str                                  # pass | fail | skip
    value: Union[float, str, None] = None        # the worst rank's value
    worst_rank: Optional[int] = None
    worst_step: Optional[int] = None
    message: str = ""
    ranks: list[RankOutcome] = msgspec.field(default_factory=list)


class GateResult(msgspec.Struct, kw_only=True):
    schema: str = SCHEMA
    passed: bool
    aggregate: str
    input: str
    baseline: Optional[str] = None
    rules: list[RuleOutcome]
    notes: list[str] = msgspec.field(default_factory=list)

    @property
    def failed(self) -> list[RuleOutcome]:
        return [r for r in self.rules if r.status == "fail"]

    def to_json(self) -> bytes:
        return msgspec.json.format(msgspec.json.encode(self), indent=2)
