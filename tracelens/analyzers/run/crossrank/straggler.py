"""The rank the others wait for: the one that arrives last at the most collectives (docs/metrics.md,
"Stragglers").

Among matched instances whose arrival skew is at least straggler_min_skew_ns (on aligned clocks), the rank
that starts last in at least straggler_min_late_share of them, and in at least straggler_min_late_count,
is the straggler. Its cost is the wait of the
other members of the instances it was last in (per step and in total). The cause is read from what the
report already holds: its median compute time against the other ranks' (slower kernels), its median device
idle time against theirs (host gaps: data loading, Python, the CPU not feeding the device), and whether its
late collectives started within launch_prompt_ns of their launch (the device was waiting for the CPU to
launch them: CPU launch delay).
"""

from __future__ import annotations

import statistics

import numpy as np

from ....contract import RankResult
from ...thresholds import Thresholds, material
from ...wording import Finding


def _median(values) -> int:
    # statistics, not numpy: a handful of steps per rank, for every rank (numpy's overhead per call dominates)
    return int(round(statistics.median(values))) if len(values) else 0


def _rank_medians(r: RankResult) -> tuple[int, int, int, int]:
    done = [s for s in r.steps if s.complete] or r.steps
    return (len(done), _median([s.duration_ns for s in done]), _median([s.compute_ns for s in done]),
            _median([s.idle_ns for s in done]))


def find(results: list[RankResult], last_pos: np.ndarray, skew: np.ndarray, caused: np.ndarray,
         last_step: np.ndarray, last_delay: np.ndarray, members: np.ndarray, th: Thresholds) -> Finding | None:
    """``last_pos``, ``skew``, ``caused`` (the others' summed wait), ``last_step`` and ``last_delay`` (start -
    launch of the last rank's kernel, -1 unknown) and ``members`` per matched instance."""
    skewed = (last_pos >= 0) & (skew >= th.straggler_min_skew_ns)
    if not skewed.any():
        return None
    counts = np.bincount(last_pos[skewed], minlength=len(results))
    late = int(np.argmax(counts))
    share = counts[late] / int(skewed.sum())
    if share < th.straggler_min_late_share or counts[late] < th.straggler_min_late_count:
        return None
    mine = skewed & (last_pos == late)
    steps = np.where(last_step[mine] < 0, -1, last_step[mine])
    by_step = {}
    for s, c in zip(steps.tolist(), caused[mine].tolist()):
        by_step[s] = by_step.get(s, 0) + c
    total = int(caused[mine].sum())
    others = max(float(np.mean(members[mine])) - 1, 1.0)
    impact = int(round(total / others / max(len(by_step), 1)))     # one other rank's wait per step, on average
    medians = [_rank_medians(r) for r in results]
    rest = [m for i, m in enumerate(medians) if i != late]
    n_steps, step_ns, compute_ns, idle_ns = medians[late]
    ranks_step, ranks_compute, ranks_idle = (_median([m[k] for m in rest]) for k in (1, 2, 3))
    compute_excess = (compute_ns - ranks_compute) / ranks_compute if ranks_compute > 0 else None
    known = last_delay[mine] >= 0
    prompt = int((known & (last_delay[mine] <= th.launch_prompt_ns)).sum())
    if compute_excess is not None and compute_excess > th.straggler_min_excess:
        verdict = "late-compute"
    elif idle_ns - ranks_idle > th.straggler_min_excess * ranks_step and material(th, idle_ns - ranks_idle,
                                                                                    ranks_step):
        verdict = "late-host"
    elif known.any() and 2 * prompt >= int(known.sum()):
        verdict = "late-launch"
    else:
        verdict = "late"
    important = material(th, impact, ranks_step)
    return Finding(
        id="straggler", severity="warning" if important else "info", rank=results[late].rank, step=None,
        verdict=verdict,
        evidence={"late_count": int(counts[late]), "skewed": int(skewed.sum()), "late_share": float(share),
                  "mean_skew_ns": int(round(float(skew[mine].mean()))), "caused_wait_ns": total,
                  "caused_wait_by_step": [[None if s < 0 else s, ns] for s, ns in sorted(by_step.items())],
                  "compute_ns": compute_ns, "ranks_compute_ns": ranks_compute, "compute_excess": compute_excess,
                  "idle_ns": idle_ns, "ranks_idle_ns": ranks_idle, "step_ns": step_ns, "ranks_step_ns": ranks_step,
                  "launched_promptly": prompt, "launch_known": int(known.sum()), "steps": n_steps,
                  "ranks": len(results), "impact_ns": impact, "material": important})
