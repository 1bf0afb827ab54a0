"""The gate's rules, evaluated per rank over a Report's steps (and a baseline's), nothing else.

The gate reads Reports (or the step rows the history database keeps of them); it never opens a trace.
Every rule aggregates each rank's complete steps into one number (median by default), so one bad rank
fails the rule and the outcome names it. The rules are written out in docs/ci.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional

import numpy as np
import pandas as pd

from ..contract import Report
from .config import GateConfig
from .result import GateResult, RankOutcome, RuleOutcome

# The columns the rules read, one row per rank x step (from a Report or from the history database).
STEP_COLUMNS = ("rank", "step", "complete", "overlap_pct", "exposed_comm_fraction", "exposed_comm_ns", "pattern")


@dataclass
class Baseline:
    """What relative rules compare with: step rows of an earlier run and where they came from."""

    steps: pd.DataFrame
    source: str


# --------------------------------------------------------------------------------------------- evaluation


def step_frame(report: Report) -> pd.DataFrame:
    """One row per rank x step with the columns the rules read (``STEP_COLUMNS``)."""
    rows = [(r.rank, s.step, s.complete, s.overlap_pct, s.exposed_comm_fraction, s.exposed_comm_ns, s.pattern)
            for r in report.ranks for s in r.steps]
    return pd.DataFrame(rows, columns=list(STEP_COLUMNS))


def aggregate(values: np.ndarray, how: str, higher_is_better: bool) -> tuple[float, int]:
    """The aggregate of ``values`` and the index of the worst one.

    ``p90`` is the value 90 % of the steps do at least as well as: the 90th percentile of a quantity where
    lower is better, the 10th where higher is better (linear interpolation).
    """
    worst = int(np.argmin(values) if higher_is_better else np.argmax(values))
    if how == "median":
        value = np.median(values)
    elif how == "mean":
        value = np.mean(values)
    elif how == "p90":
        value = np.percentile(values, 10 if higher_is_better else 90)
    else:
        value = values[worst]
    return float(value), worst


def _usable(steps: pd.DataFrame) -> pd.DataFrame:
    """A rank's complete steps, or all of them when none is complete (a one-step capture)."""
    done = steps[steps["complete"].astype(bool)]
    return done if len(done) else steps


@dataclass(frozen=True)
class _Metric:
    column: str
    higher_is_better: bool
    scale: float = 1.0
    unit: str = ""


_OVERLAP = _Metric("overlap_pct", True, 1.0, " %")
_EXPOSED = _Metric("exposed_comm_fraction", False)
_EXPOSED_MS = _Metric("exposed_comm_ns", False, 1e-6, " ms")


def _values(steps: pd.DataFrame, metric: _Metric) -> np.ndarray:
    """The metric's column in its gate unit, NaN where undefined."""
    return pd.to_numeric(steps[metric.column], errors="coerce").to_numpy(dtype=float) * metric.scale


def _rank_values(steps: pd.DataFrame, metric: _Metric, how: str) -> dict[int, tuple[Optional[float], Optional[int]]]:
    """{rank: (aggregate, worst step)}; (None, None) where the metric is undefined on every step."""
    out = {}
    for rank, group in steps.groupby("rank", sort=True):
        group = _usable(group)
        vals = _values(group, metric)
        ok = ~np.isnan(vals)
        if not ok.any():
            out[int(rank)] = (None, None)
            continue
        value, worst = aggregate(vals[ok], how, metric.higher_is_better)
        step = group["step"].to_numpy()[ok][worst]
        out[int(rank)] = (value, None if pd.isna(step) else int(step))
    return out


def _pooled(steps: pd.DataFrame, metric: _Metric, how: str) -> Optional[float]:
    parts = [_usable(g) for _, g in steps.groupby("rank")]
    if not parts:
        return None
    vals = _values(pd.concat(parts), metric)
    vals = vals[~np.isnan(vals)]
    return aggregate(vals, how, metric.higher_is_better)[0] if vals.size else None


def _fmt(value: Optional[float], metric: _Metric) -> str:
    if value is None:
        return "n/a"
    if metric is _EXPOSED:
        return f"{value:.4f}"
    return f"{value:.2f}{metric.unit}"


def _finish(rule: str, description: str, limit, ranks: list[RankOutcome], worse) -> RuleOutcome:
    """Roll rank outcomes into the rule's: it fails when any rank fails; the worst rank is named."""
    failing = [r for r in ranks if r.status == "fail"]
    pool = failing or [r for r in ranks if r.status == "pass"] or ranks
    worst = max(pool, key=worse) if pool else None
    status = "fail" if failing else ("pass" if any(r.status == "pass" for r in ranks) else "skip")
    if worst is None:
        message = "no ranks in the input"
        status = "fail"
    elif failing:
        message = (f"{len(failing)} of {len(ranks)} rank(s) fail; worst rank {worst.rank}: {worst.message}")
    elif status == "skip":
        message = f"no rank compared; rank {worst.rank}: {worst.message}"
    else:
        message = f"all {len(ranks)} rank(s) pass; worst rank {worst.rank}: {worst.message}"
    return RuleOutcome(rule=rule, description=description, limit=limit, status=status,
                       value=worst.value if worst else None, worst_rank=worst.rank if worst else None,
                       worst_step=worst.worst_step if worst else None, message=message, ranks=ranks)


def _sort_key(r: RankOutcome, higher_is_better: bool) -> float:
    """Order for picking the worst rank: undefined values first, then by badness."""
    if not isinstance(r.value, (int, float)):
        return math.inf
    return -r.value if higher_is_better else r.value


def _threshold_rule(steps, rule, description, metric: _Metric, limit: float, how: str) -> RuleOutcome:
    ranks = []
    for rank, (value, step) in _rank_values(steps, metric, how).items():
        if value is None:
            ranks.append(RankOutcome(rank=rank, status="fail", value=None,
                                     message="undefined: no communication in any step"))
            continue
        ok = value >= limit if metric.higher_is_better else value <= limit
        sign = "≥" if metric.higher_is_better else "≤"
        ranks.append(RankOutcome(rank=rank, status="pass" if ok else "fail", value=round(value, 6),
                                 worst_step=step, message=f"{how} {_fmt(value, metric)} (limit {sign} "
                                                          f"{_fmt(limit, metric)}; worst step {step})"))
    return _finish(rule, description, limit, ranks, lambda r: _sort_key(r, metric.higher_is_better))


def _relative_rule(steps, base: Baseline, rule, description, metric: _Metric, limit: float, how: str,
                   notes: list[str]) -> RuleOutcome:
    current = _rank_values(steps, metric, how)
    before = _rank_values(base.steps, metric, how)
    pooled = _pooled(base.steps, metric, how)
    if set(current) - set(before):
        notes.append(f"{rule}: baseline has ranks {sorted(before)}, this run {sorted(current)}; ranks missing "
                     f"from the baseline are compared with the baseline's {how} over all its ranks")
    ranks = []
    for rank, (value, step) in current.items():
        ref = before.get(rank, (pooled, None))[0]
        if ref is None:
            ranks.append(RankOutcome(rank=rank, status="skip", value=None, worst_step=step,
                                     message="baseline has no defined value to compare with"))
            continue
        if value is None:
            ranks.append(RankOutcome(rank=rank, status="fail", value=None, baseline=round(ref, 6),
                                     message="undefined: no communication in any step"))
            continue
        # A drop in overlap (points), or a rise in exposed fraction: positive means worse.
        change = (ref - value) if metric.higher_is_better else (value - ref)
        ok = change <= limit + 1e-9
        word = "drop" if metric.higher_is_better else "rise"
        unit = " points" if metric is _OVERLAP else ""
        ranks.append(RankOutcome(
            rank=rank, status="pass" if ok else "fail", value=round(change, 6), baseline=round(ref, 6),
            worst_step=step, message=f"{how} {_fmt(value, metric)} vs baseline {_fmt(ref, metric)}: "
                                     f"{word} {change:+.4g}{unit} (limit {limit:g}{unit})"))
    outcome = _finish(rule, description, limit, ranks,
                      lambda r: r.value if isinstance(r.value, float) else -math.inf)
    if outcome.status == "skip":
        # A baseline was there but gave nothing to compare with (no ranks, or no rank with a defined value):
        # a gate that compared nothing must not pass (docs/ci.md).
        outcome.status = "fail"
        outcome.message = (f"nothing compared: the baseline {base.source} has "
                           + ("no ranks or steps" if base.steps.empty else
                              "no defined value for any rank (no communication in its steps)"))
    return outcome


def _critical_rule(report: Report) -> RuleOutcome:
    ranks = []
    for r in report.ranks:
        # A finding about the run that names no rank (rank -1: nccl-transport) counts for every rank.
        found = [d for d in report.diagnoses if d.rank in (r.rank, -1) and d.severity == "critical"]
        first = found[0] if found else None
        msg = (f"{len(found)} critical diagnosis(es), first: {first.title} (step {first.step})" if found
               else "no critical diagnoses")
        ranks.append(RankOutcome(rank=r.rank, status="fail" if found else "pass", value=float(len(found)),
                                 worst_step=first.step if first else None, message=msg))
    return _finish("no-critical", "no critical diagnoses", True, ranks, lambda o: o.value)


def _pattern_rule(steps: pd.DataFrame, report: Report, allowed: tuple[str, ...]) -> RuleOutcome:
    ranks = []
    for r in report.ranks:
        mine = _usable(steps[steps["rank"] == r.rank])
        off = mine[~mine["pattern"].isin(allowed)]
        ok = r.pattern in allowed
        step = None if off.empty or pd.isna(off["step"].iloc[0]) else int(off["step"].iloc[0])
        how = "no pattern holds a majority of its steps" if r.pattern == "mixed" else "majority of its steps"
        msg = (f"pattern {r.pattern or 'n/a'} ({how}); "
               f"{len(off)} of {len(mine)} step(s) are not {'/'.join(allowed)}")
        ranks.append(RankOutcome(rank=r.rank, status="pass" if ok else "fail", value=r.pattern,
                                 worst_step=step, message=msg))
    return _finish("require-pattern", "overlap pattern", "/".join(allowed), ranks,
                   lambda o: 0 if o.status == "pass" else 1)


def evaluate(report: Report, config: GateConfig, baseline: Optional[Baseline] = None, *,
             source: str = "", notes: Optional[list[str]] = None) -> GateResult:
    """Apply every configured rule to ``report``; relative rules compare with ``baseline``.

    Relative rules with no baseline are skipped (not passed) with a note, e.g. the first CI run against an
    empty history database.
    """
    how = config.aggregate
    notes = list(notes or [])
    steps = step_frame(report)
    rules: list[RuleOutcome] = []
    if config.min_overlap_pct is not None:
        rules.append(_threshold_rule(steps, "min-overlap-pct", "overlap % of comm time hidden by compute",
                                     _OVERLAP, config.min_overlap_pct, how))
    if config.max_exposed_fraction is not None:
        rules.append(_threshold_rule(steps, "max-exposed-fraction", "exposed comm / step time",
                                     _EXPOSED, config.max_exposed_fraction, how))
    if config.max_exposed_ms is not None:
        rules.append(_threshold_rule(steps, "max-exposed-ms", "exposed comm per step (ms)",
                                     _EXPOSED_MS, config.max_exposed_ms, how))
    if config.no_critical:
        rules.append(_critical_rule(report))
    if config.require_pattern:
        rules.append(_pattern_rule(steps, report, config.require_pattern))
    for rule, desc, metric, limit in (
            ("max-overlap-drop", "overlap % drop vs baseline (points)", _OVERLAP, config.max_overlap_drop),
            ("max-exposed-rise", "exposed fraction rise vs baseline", _EXPOSED, config.max_exposed_rise)):
        if limit is None:
            continue
        if baseline is None:
            rules.append(RuleOutcome(rule=rule, description=desc, limit=limit, status="skip",
                                     message="no baseline to compare with"))
            continue
        rules.append(_relative_rule(steps, baseline, rule, desc, metric, limit, how, notes))
    return GateResult(passed=not any(r.status == "fail" for r in rules), aggregate=how, input=source,
                      baseline=baseline.source if baseline else None, rules=rules, notes=notes)
