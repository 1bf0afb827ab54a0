"""Two runs compared: the versioned JSON contract of ``tracelens diff`` (schema ``tracelens.diff/1``;
docs/metrics.md, "Comparing two runs"). Keys may be added in later versions; existing keys never change
meaning. Times are int64 ns per step; a change is AFTER less BEFORE (negative: faster)."""

from __future__ import annotations

from typing import Optional

import msgspec

from .per_run import Culprit

DIFF_SCHEMA = "tracelens.diff/1"


class DiffSide(msgspec.Struct, kw_only=True):
    """One of the two runs."""

    label: str                             # the path it was read from
    ranks: int
    world_size: Optional[int]              # as the traces say (null when none does)
    steps: int                             # complete steps, the median over its ranks
    mode: str                              # gpu | cpu | mixed
    step_ns: int                           # the mean over its ranks of each rank's mean complete step
    headline: str                          # its run verdict
    culprit: Optional[Culprit]             # the rank the others wait for, if one is


class CauseChange(msgspec.Struct, kw_only=True):
    """One cause of the run verdict in both runs, and what BEFORE said fixing it saves."""

    cause: str                             # peer-wait | not-overlapped | overlap-tax
    before_ns: Optional[int]               # its cost per step (null: not a cause of that run)
    after_ns: Optional[int]
    predicted_ns: Optional[int]            # BEFORE's saving for it (null: it could not tell)
    predicted_low_ns: Optional[int] = None
    predicted_high_ns: Optional[int] = None


class Prediction(msgspec.Struct, kw_only=True):
    """What BEFORE predicted for the change that was made, against what AFTER shows."""

    cause: str                             # the cause whose cost fell the most
    predicted_ns: Optional[int]            # null: BEFORE made no prediction for it (note says why)
    predicted_low_ns: Optional[int]
    predicted_high_ns: Optional[int]
    observed_ns: int                       # BEFORE's step time less AFTER's
    held: Optional[bool]                   # within the interval, or within 15 % of the prediction
    note: Optional[str] = None


class NameChange(msgspec.Struct, kw_only=True):
    """One kernel, CPU op, collective or the device's idle time in both runs, per step."""

    kind: str                              # compute | comm | memcpy | memset | sync | cpu-op | collective | idle
    name: str
    before_count: float
    after_count: float
    before_ns: int
    after_ns: int
    change_ns: int                         # after_ns - before_ns


class Diff(msgspec.Struct, kw_only=True):
    schema: str = DIFF_SCHEMA
    summary: str                           # the answer in one sentence
    before: DiffSide
    after: DiffSide
    step_change_ns: int                    # after.step_ns - before.step_ns
    step_change: Optional[float]           # that over before.step_ns (null: no BEFORE step)
    prediction: Optional[Prediction]
    causes: list[CauseChange]
    changes: list[NameChange]              # the largest changes first
    notes: list[str] = msgspec.field(default_factory=list)   # what differs between the runs besides

    def to_json(self, indent: int = 2) -> bytes:
        raw = msgspec.json.encode(self)
        return msgspec.json.format(raw, indent=indent) if indent else raw
