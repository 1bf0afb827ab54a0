"""Predictions against re-runs: what the run verdict says removing a cause saves per step, against what the
step time does when the change is made (issue 48; bench/RESULTS.md, "Predictions against re-runs").

    python bench/bench_whatif.py                    # record every configuration 5 times, interleaved, then compare
    python bench/bench_whatif.py --repeats 9 --only straggler
    python bench/bench_whatif.py --analyze          # compare the recordings already under TL_WHATIF_DIR again

Each recording is `tracelens collect` of examples/ddp_train.py (2 ranks under torchrun; gloo on a CPU
machine, NCCL with a GPU per rank) with one knob turned: a slow rank at three delays, DDP bucket caps,
no_sync, a host sync in every step. The configurations are recorded round-robin (one of each, then the next
round), so that a drift of the machine's speed falls on all of them alike. A recording's step time is the mean
over its ranks of each rank's mean complete step; a configuration's, the median over its recordings. A
change's observed saving is the BEFORE configuration's step time less the AFTER's; its predicted saving, the
median over the BEFORE recordings of what their verdict says removing the cause saves (`saving_ns`, its
interval `saving_low_ns`-`saving_high_ns`), or nothing where the verdict says it cannot tell.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("TL_WHATIF_DIR", "/tmp/tl-whatif"))
TRACELENS = Path(sys.executable).parent / "tracelens"
TORCHRUN = Path(sys.executable).parent / "torchrun"

CONFIGS = {     # name: ddp_train.py's arguments
    "base": [],
    "slow10": ["--slow-rank", "1", "--slow-ms", "10"],
    "slow40": ["--slow-rank", "1", "--slow-ms", "40"],
    "slow80": ["--slow-rank", "1", "--slow-ms", "80"],
    "nosync": ["--no-sync"],
    "cap0.25": ["--bucket-cap-mb", "0.25"],
    "cap1": ["--bucket-cap-mb", "1"],
    "cap5": ["--bucket-cap-mb", "5"],
    "item": ["--item-every-step"],
}
# (before, after, the cause the change removes, what the change is)
CHANGES = [
    ("slow10", "base", "peer-wait", "remove `--slow-rank 1 --slow-ms 10`"),
    ("slow40", "base", "peer-wait", "remove `--slow-rank 1 --slow-ms 40`"),
    ("slow80", "base", "peer-wait", "remove `--slow-rank 1 --slow-ms 80`"),
    ("nosync", "base", "not-overlapped", "`--no-sync` → DDP buckets (25 MB)"),
    ("nosync", "cap1", "not-overlapped", "`--no-sync` → DDP buckets of 1 MB"),
    ("nosync", "cap0.25", "not-overlapped", "`--no-sync` → DDP buckets of 0.25 MB"),
    ("cap0.25", "base", "not-overlapped", "buckets of 0.25 MB → 25 MB"),
    ("cap5", "base", "not-overlapped", "buckets of 5 MB → 25 MB"),
    ("item", "base", None, "remove `loss.item()` from every step"),
]
GROUPS = {"straggler": ("base", "slow10", "slow40", "slow80"), "buckets": ("base", "nosync", "cap0.25", "cap1", "cap5"),
          "item": ("base", "item")}


def record(name: str, index: int, ranks: int) -> Path:
    out = WORK / f"{name}-{index:02d}"
    shutil.rmtree(out, ignore_errors=True)
    cmd = [str(TRACELENS), "collect", "--no-report", "--out", str(out), "--", str(TORCHRUN),
           "--nproc-per-node", str(ranks), str(ROOT / "examples" / "ddp_train.py"), *CONFIGS[name]]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{name} #{index}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
    print(f"  {name} #{index}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return out


def measure(folder: Path) -> dict:
    """A recording's step time and its verdict's causes (each cause's cost and predicted saving)."""
    from tracelens import api

    rep = api.report(str(folder), cache=False)
    means = []
    for r in rep.ranks:
        done = [s for s in r.steps if s.complete] or r.steps
        means.append(sum(s.duration_ns for s in done) / len(done))
    causes = {c.cause: {"ns_per_step": c.ns_per_step, "saving_ns": getattr(c, "saving_ns", None),
                        "saving_low_ns": getattr(c, "saving_low_ns", None),
                        "saving_high_ns": getattr(c, "saving_high_ns", None),
                        "culprit": c.culprit.rank if c.culprit else None,
                        "reason": c.culprit.reason if c.culprit else None}
              for c in rep.verdict.causes}
    return {"folder": folder.name, "step_ns": statistics.mean(means), "headline": rep.verdict.headline,
            "causes": causes}


def _ms(ns) -> str:
    return "—" if ns is None else f"{ns / 1e6:.2f}"


def observed_interval(before: list[float], after: list[float], rounds: int = 2000) -> tuple[float, float]:
    """A 90 % interval of the difference of the two medians, by resampling the recordings (seeded: the same
    interval for the same recordings)."""
    rng = random.Random(0)
    diffs = sorted(statistics.median(rng.choices(before, k=len(before))) -
                   statistics.median(rng.choices(after, k=len(after))) for _ in range(rounds))
    return diffs[int(0.05 * rounds)], diffs[int(0.95 * rounds) - 1]


def compare(rows: list[dict]) -> str:
    by = {}
    for row in rows:
        by.setdefault(row["config"], []).append(row)
    step = {k: statistics.median(r["step_ns"] for r in v) for k, v in by.items()}
    lines = ["| change made | recordings | predicted saving per step, ms (interval) | named culprit | "
             "observed, ms (90 % interval; step before → after) | error |", "|---|---|---|---|---|---|"]
    for before, after, cause, what in CHANGES:
        if before not in by or after not in by:
            continue
        observed = step[before] - step[after]
        lo, hi = observed_interval([r["step_ns"] for r in by[before]], [r["step_ns"] for r in by[after]])
        got = [r["causes"].get(cause, {}) for r in by[before]] if cause else []
        saving = [c["saving_ns"] for c in got if c.get("saving_ns") is not None]
        low = [c["saving_low_ns"] for c in got if c.get("saving_low_ns") is not None]
        high = [c["saving_high_ns"] for c in got if c.get("saving_high_ns") is not None]
        cost = [c["ns_per_step"] for c in got if c.get("ns_per_step") is not None]
        culprits = [c.get("culprit") for c in got]
        named = f"rank 1 in {culprits.count(1)} of {len(got)}" if cause == "peer-wait" else ""
        if saving:
            pred = statistics.median(saving)
            interval = f" ({_ms(statistics.median(low))}–{_ms(statistics.median(high))})" if low and high else ""
            shown = f"{_ms(pred)}{interval}"
            error = f"{(pred - observed) / observed:+.0%}" if abs(observed) > 0.5e6 else "n/a"
        else:
            shown = f"none (cost {_ms(statistics.median(cost))})" if cost else "none"
            error = "—"
        lines.append(f"| {what} | {len(by[before])} + {len(by[after])} | {shown} | {named} | {_ms(observed)} "
                     f"({_ms(lo)}–{_ms(hi)}; {_ms(step[before])} → {_ms(step[after])}) | {error} |")
    spread = {k: (min(r["step_ns"] for r in v), max(r["step_ns"] for r in v)) for k, v in by.items()}
    lines += ["", "Step time per configuration, ms: " + "; ".join(
        f"{k} {_ms(step[k])} ({_ms(spread[k][0])}–{_ms(spread[k][1])}, {len(by[k])} recordings)" for k in sorted(by))]
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--only", choices=sorted(GROUPS), action="append", help="one group of configurations")
    ap.add_argument("--analyze", action="store_true", help="no new recordings: compare those under TL_WHATIF_DIR")
    a = ap.parse_args(argv)
    names = sorted({n for g in (a.only or GROUPS) for n in GROUPS[g]}, key=list(CONFIGS).index)
    WORK.mkdir(parents=True, exist_ok=True)
    if not a.analyze:
        for i in range(a.repeats):
            print(f"round {i + 1} of {a.repeats}", file=sys.stderr)
            for name in names:
                record(name, i, a.ranks)
    rows = []
    for folder in sorted(WORK.iterdir()):
        name = folder.name.rsplit("-", 1)[0]
        if folder.is_dir() and name in names:
            rows.append({"config": name, **measure(folder)})
    (WORK / "measured.json").write_text(json.dumps(rows, indent=1))
    print(compare(rows))


if __name__ == "__main__":
    main()
