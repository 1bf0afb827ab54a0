"""The text report of many ranks: its length in lines and the time of a warm report (the Report read back from
the cache and rendered), against an older version side by side.

    python bench/bench_text.py                            # 1,024 copies of the small corpus rank
    python bench/bench_text.py --before /tmp/tl-before    # also the tracelens package under that folder

The copies are bench_scale's (``/tmp/tl-bench/small/n1024``). Each version fills its own cache once, then both
render the same folder in turn, ``--runs`` times (alternating, so a noisy machine slows both alike); the
medians and the ratio are printed. Output goes to a file of the default file width (160 columns).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_scale  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def _command(before: str | None, folder: Path, out: Path) -> list[str]:
    prefix = f"import sys; sys.path.insert(0, {before!r}); " if before else ""
    return [sys.executable, "-c", prefix + "from tracelens.cli import run; import sys; "
            f"sys.argv = ['tracelens', 'report', {str(folder)!r}, '-o', {str(out)!r}, '--force']; run()"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--before", metavar="DIR", help="also the tracelens package under DIR (an older version)")
    args = ap.parse_args()
    src = bench_scale.CORPUS / bench_scale.SETS["small"][0]
    folder = bench_scale.copies("small", src, args.ranks)
    versions = {"now": None, **({"before": args.before} if args.before else {})}
    work = Path(tempfile.mkdtemp(prefix="tl-bench-text-"))
    times: dict[str, list[float]] = {v: [] for v in versions}
    lines: dict[str, int] = {}
    for run in range(args.runs + 1):              # the first run of each version fills its cache
        for name, before in versions.items():
            out = work / f"{name}.txt"
            env = {**os.environ, "TRACELENS_CACHE": str(work / f"cache-{name}")}
            env.pop("COLUMNS", None)
            t0 = time.perf_counter()
            subprocess.run(_command(before, folder, out), env=env, check=True, cwd=ROOT)
            if run:
                times[name].append(time.perf_counter() - t0)
            lines[name] = len(out.read_text(encoding="utf-8").splitlines())
    print(f"text report of {args.ranks} ranks ({folder}), warm, {args.runs} runs each, alternating:")
    for name in versions:
        t = times[name]
        print(f"  {name:6} {lines[name]:>6} lines   wall median {statistics.median(t):.3f} s "
              f"(min {min(t):.3f}, max {max(t):.3f})")
    if "before" in versions:
        ratio = [a / b for a, b in zip(times["now"], times["before"])]
        print(f"  now/before wall: median {statistics.median(ratio):.3f} (min {min(ratio):.3f}, max {max(ratio):.3f})")


if __name__ == "__main__":
    main()
