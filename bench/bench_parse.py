"""Cold parse+report benchmark: wall time and peak RSS of `tracelens report FILE --format json`.

Each run is a fresh process (imports included), as a user would run it; the median of several runs is
reported. Also prints an in-process split (import / parse / analyze+render) for orientation.

    python bench/bench_parse.py [TRACE] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

DEFAULT = Path(__file__).resolve().parents[2] / "shared/corpus/hta/df_index_resolver/df_index_resolver.json.gz"


def cold_run(trace: Path) -> tuple[float, float]:
    """(wall seconds, peak RSS MB) of one CLI process."""
    cmd = [sys.executable, "-c", "from tracelens.cli import run; run()", "report", str(trace), "--format", "json"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"tracelens failed on {trace}: {proc.stderr.read().decode()}")
    return wall, usage.ru_maxrss / 1024  # ru_maxrss is KiB on Linux


def split(trace: Path) -> str:
    code = (
        "import time; t0=time.perf_counter(); import tracelens; from tracelens.renderers import render; "
        "t1=time.perf_counter(); tr=tracelens.load(%r); t2=time.perf_counter(); "
        "render(tracelens.analyze(tr), 'json'); t3=time.perf_counter(); "
        "print(f'import {t1-t0:.3f} s, parse {t2-t1:.3f} s, analyze+render {t3-t2:.3f} s')" % str(trace)
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (the shared corpus is needed for this benchmark)", file=sys.stderr)
        return 2
    cold_run(args.trace)  # warm the page cache; not counted
    runs = [cold_run(args.trace) for _ in range(args.runs)]
    walls, rss = [r[0] for r in runs], [r[1] for r in runs]
    print(f"trace: {args.trace.name} ({args.trace.stat().st_size / 1e6:.1f} MB on disk)")
    print(f"cold parse+report, {args.runs} runs: median wall {statistics.median(walls):.3f} s "
          f"(min {min(walls):.3f}, max {max(walls):.3f}); median peak RSS {statistics.median(rss):.0f} MB")
    print(f"in-process split: {split(args.trace)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
