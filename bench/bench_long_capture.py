"""A long capture: one rank of 100, 1,000 and 3,000 marked steps (the generated training loop of
tests/fixtures/synth/loops.py: 18 device activities a step, ProfilerStep#N ranges), reported cold
(``tracelens report --no-cache`` to a file, a fresh process each time). Prints the wall time, the time per
step and the text report's lines (a rank past 50 steps shows its steps' distribution and 5 worst steps).

    python bench/bench_long_capture.py [--steps 100 1000 3000] [--runs 3]
    python bench/bench_long_capture.py --stages      # in one process: load, analyze_rank, combine, render
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))   # the trace generator is a test fixture, not in the package
from fixtures.synth.loops import Loop, loop_doc  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, nargs="+", default=[100, 1000, 3000])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--stages", action="store_true", help="time each stage in this process (best of --runs)")
    args = ap.parse_args()
    if args.stages:
        stages(args.steps, args.runs)
        return
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for n in args.steps:
            trace = loop_doc(Loop(steps=n, marked=True)).write(folder / f"rank0_{n}.json")
            out = folder / f"report_{n}.txt"
            cmd = [sys.executable, "-c", "from tracelens.cli import run; run()", "report", str(trace), "--no-cache",
                   "-o", str(out), "--force"]
            times = []
            for _ in range(args.runs):
                t0 = time.perf_counter()
                subprocess.run(cmd, check=True, capture_output=True)
                times.append(time.perf_counter() - t0)
            wall = statistics.median(times)
            lines = len(out.read_text().splitlines())
            print(f"{n:>6,} steps: median {wall:.3f} s over {args.runs} runs ({1e3 * wall / n:.3f} ms per step), "
                  f"text report {lines} lines")


def stages(counts: list[int], runs: int) -> None:
    import tracelens
    from tracelens.renderers import render

    with tempfile.TemporaryDirectory() as tmp:
        for n in counts:
            trace = loop_doc(Loop(steps=n, marked=True)).write(Path(tmp) / f"rank0_{n}.json")
            best: dict[str, float] = {}
            for _ in range(runs):
                t0 = time.perf_counter()
                (rank,) = tracelens.load([trace], cache=False)
                t1 = time.perf_counter()
                analysis = tracelens.analyze_rank(rank)
                t2 = time.perf_counter()
                rep = tracelens.combine([analysis])
                t3 = time.perf_counter()
                render(rep, "text", width=160)
                t4 = time.perf_counter()
                for k, v in (("load", t1 - t0), ("analyze", t2 - t1), ("combine", t3 - t2), ("render", t4 - t3)):
                    best[k] = min(best.get(k, float("inf")), v)
            print(f"{n:>6,} steps: " + "  ".join(f"{k} {1e3 * v / n:.3f} ms/step" for k, v in best.items()))


if __name__ == "__main__":
    main()
