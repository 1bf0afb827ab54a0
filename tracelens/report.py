"""The Report: the versioned JSON contract (schema ``tracelens.report/1``) every renderer, the gate and the
dashboard read. Keys may be added in later versions; existing keys never change meaning.

Ratios are ``None`` (JSON null) when undefined (no communication, zero-length window) — never NaN.
"""

from __future__ import annotations

from typing import Optional

import msgspec

from ._version import __version__

SCHEMA = "tracelens.report/1"


class StepMetrics(msgspec.Struct, kw_only=True):
    step: Optional[int]
    start_ns: int
    end_ns: int
    duration_ns: int
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    idle_ns: int
    overlap_pct: Optional[float]
    exposed_comm_fraction: Optional[float]
    complete: bool = True


class Totals(msgspec.Struct, kw_only=True):
    duration_ns: int
    compute_ns: int
    comm_ns: int
    overlap_ns: int
    exposed_comm_ns: int
    idle_ns: int
    overlap_pct: Optional[float]
    exposed_comm_fraction: Optional[float]


class RankResult(msgspec.Struct, kw_only=True):
    rank: int
    world_size: Optional[int]
    device: Optional[int]
    device_name: Optional[str]
    mode: str                  # "gpu" | "cpu"
    source: str
    steps: list[StepMetrics]
    totals: Totals


class Summary(msgspec.Struct, kw_only=True):
    ranks: int
    steps: int
    overlap_pct: Optional[float]
    exposed_comm_fraction: Optional[float]
    worst_rank: Optional[int]
    comm_ns: int = 0
    exposed_comm_ns: int = 0


class Collective(msgspec.Struct, kw_only=True):
    rank: int
    step: Optional[int]
    name: str
    op: Optional[str]
    bytes: Optional[int]
    start_ns: int
    duration_ns: int
    exposed_ns: int


class InputFile(msgspec.Struct, kw_only=True):
    path: str
    format: str
    rank: int
    bytes: int
    rank_rule: str = "distributedInfo"


class WarningEntry(msgspec.Struct, kw_only=True):
    code: str
    rank: Optional[int]
    count: int
    message: str


class Tool(msgspec.Struct, kw_only=True):
    name: str = "tracelens"
    version: str = __version__


class Report(msgspec.Struct, kw_only=True):
    schema: str = SCHEMA
    tool: Tool = msgspec.field(default_factory=Tool)
    inputs: list[InputFile]
    ranks: list[RankResult]
    summary: Summary
    collectives: list[Collective]
    diagnoses: list[dict] = msgspec.field(default_factory=list)
    warnings: list[WarningEntry] = msgspec.field(default_factory=list)

    def to_json(self, indent: int = 2) -> bytes:
        raw = msgspec.json.encode(self)
        return msgspec.json.format(raw, indent=indent) if indent else raw

    def to_dict(self) -> dict:
        return msgspec.to_builtins(self)

    @classmethod
    def from_json(cls, data: bytes | str) -> "Report":
        """Read a saved report back (unknown keys from newer versions are ignored)."""
        return msgspec.json.decode(data, type=cls)


def ratio(num: int, den: int, scale: float = 1.0) -> Optional[float]:
    """num/den (times scale), or None when den is 0 — the report never holds NaN."""
    return None if den <= 0 else scale * num / den
