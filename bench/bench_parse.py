"""Cold parse+report benchmark: wall time and peak memory of `tracelens report FILE --format json`.

Each run is a fresh process (imports included), as a user would run it; the median of several runs is
reported, with and without the Kineto decode workers (``TRACELENS_JOBS=0`` decodes in the main process).

Memory is measured in separate runs, so that sampling does not slow the timed ones: the proportional set
size (PSS) of the report process and all its children (the decode workers) is summed every 5 ms and the
largest sum is reported. PSS shares each page among the processes mapping it, so libraries loaded by
both processes are not counted twice; the sum is what the whole command holds at once. The report
process's own peak RSS (what `/usr/bin/time` reports) is printed too.

Bytecode is cached as after a first run (PYTHONDONTWRITEBYTECODE is dropped), as for an installed package.

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
CMD = [sys.executable, "-c", "from tracelens.cli import run; run()", "report"]


def _env(jobs: str | None) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONDONTWRITEBYTECODE", "TRACELENS_JOBS")}
    env["TRACELENS_NO_CACHE"] = "1"       # cold: every run parses (bench_cache.py and RESULTS.md: the warm path)
    if jobs is not None:
        env["TRACELENS_JOBS"] = jobs
    return env


def cold_run(trace: Path, jobs: str | None = None) -> float:
    """Wall seconds of one CLI process."""
    t0 = time.perf_counter()
    proc = subprocess.run([*CMD, str(trace), "--format", "json"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          env=_env(jobs))
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"tracelens failed on {trace}: {proc.stderr.decode()}")
    return wall


def _pss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _tree(pid: int) -> list[int]:
    pids, todo = [], [pid]
    while todo:
        p = todo.pop()
        pids.append(p)
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                todo += [int(c) for c in fh.read().split()]
        except OSError:
            pass
    return pids


def memory_run(trace: Path, jobs: str | None = None) -> tuple[float, float]:
    """(peak summed PSS of the process tree in MB, the report process's own peak RSS in MB)."""
    proc = subprocess.Popen([*CMD, str(trace), "--format", "json"], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, env=_env(jobs))
    peak = 0
    while True:
        pid, _, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = 0  # reaped here; keeps Popen from waiting again
            return peak / 1024, usage.ru_maxrss / 1024  # ru_maxrss is KiB on Linux
        peak = max(peak, sum(_pss_kb(p) for p in _tree(proc.pid)))
        time.sleep(0.005)


def summary(label: str, trace: Path, jobs: str | None, runs: int) -> str:
    walls = [cold_run(trace, jobs) for _ in range(runs)]
    mem = [memory_run(trace, jobs) for _ in range(3)] if Path("/proc/self/smaps_rollup").exists() else []
    text = (f"{label}: median wall {statistics.median(walls):.3f} s (min {min(walls):.3f}, max {max(walls):.3f}, "
            f"{runs} runs)")
    if mem:
        text += (f"; peak memory {statistics.median(m[0] for m in mem):.0f} MB (PSS, all processes), "
                 f"report process peak RSS {statistics.median(m[1] for m in mem):.0f} MB")
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="?", type=Path, default=DEFAULT)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()
    if not args.trace.exists():
        print(f"trace not found: {args.trace} (the shared corpus is needed for this benchmark)", file=sys.stderr)
        return 2
    cold_run(args.trace)  # warm the page cache and the bytecode cache; not counted
    print(f"trace: {args.trace.name} ({args.trace.stat().st_size / 1e6:.1f} MB on disk)")
    print(summary("cold parse+report", args.trace, None, args.runs))
    print(summary("  decoding in the main process (TRACELENS_JOBS=0)", args.trace, "0", args.runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
