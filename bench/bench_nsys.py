"""nsys benchmark: tracelens parse+report of an export vs. sqlite3 merely reading the same rows.

Both run in the same warm process (imports excluded: the baseline needs none), alternately, several times;
the medians and their ratio are printed, and the ratio of the fastest runs (the least disturbed by other
work on a shared machine). The target is a ratio of at most 2.

    python bench/bench_nsys.py [EXPORT.sqlite ...] [--runs N] [--synthetic-steps N]

Without arguments: the largest corpus export plus two generated exports (wfbp_100 scenario): one rank with
many steps, and eight ranks in one file.
"""

from __future__ import annotations

import argparse
import statistics
import sqlite3
import sys
import tempfile
import time
import urllib.parse
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT = ROOT.parent / "shared/corpus/nsys/nsys-ai/mfu_2gpu_before.sqlite"

# The rows tracelens reads, as plain SELECTs (columns present in every table these exports carry).
BASELINE = {
    "CUPTI_ACTIVITY_KIND_KERNEL": "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, "
                                  "demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL",
    "CUPTI_ACTIVITY_KIND_MEMCPY": "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes, "
                                  "copyKind, srcKind, dstKind FROM CUPTI_ACTIVITY_KIND_MEMCPY",
    "CUPTI_ACTIVITY_KIND_MEMSET": "SELECT start, end, deviceId, contextId, streamId, correlationId, globalPid, bytes, "
                                  "memKind FROM CUPTI_ACTIVITY_KIND_MEMSET",
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": "SELECT start, end, deviceId, contextId, streamId, correlationId, "
                                           "globalPid FROM CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
    "CUPTI_ACTIVITY_KIND_RUNTIME": "SELECT start, end, globalTid, correlationId, nameId, eventClass "
                                   "FROM CUPTI_ACTIVITY_KIND_RUNTIME",
    "NVTX_EVENTS": "SELECT start, end, globalTid, text, textId, domainId FROM NVTX_EVENTS",
    "StringIds": "SELECT id, value FROM StringIds",
    "ThreadNames": "SELECT globalTid, nameId FROM ThreadNames",
}


def read_rows(path: Path) -> int:
    con = sqlite3.connect("file:" + urllib.parse.quote(str(path.resolve())) + "?mode=ro", uri=True)
    tables = {n for (n,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    n = sum(len(con.execute(sql).fetchall()) for t, sql in BASELINE.items() if t in tables)
    con.close()
    return n


def tracelens_report(path: Path) -> None:
    import tracelens
    from tracelens.renderers import render

    render(tracelens.analyze(tracelens.load(str(path), cache=False)), "json")   # parsed every time


def _timed(fn, path: Path) -> float:
    t0 = time.perf_counter()
    fn(path)
    return time.perf_counter() - t0


def paired_times(path: Path, runs: int) -> tuple[list[float], list[float]]:
    """Baseline and tracelens timed alternately, so that a busy spell of the machine hits both."""
    base, ours = [], []
    for _ in range(runs):
        base.append(_timed(read_rows, path))
        ours.append(_timed(tracelens_report, path))
    return base, ours


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("exports", nargs="*", type=Path)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--synthetic-steps", type=int, default=400)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    sys.path.insert(0, str(ROOT / "tests"))   # the trace generator is a test fixture, not in the package
    from fixtures import synth

    paths = list(args.exports)
    tmp = tempfile.TemporaryDirectory()
    if not paths:
        if DEFAULT.exists():
            paths.append(DEFAULT)
        sc = replace(synth.SCENARIOS["wfbp_100"], steps=args.synthetic_steps, ranks=1)
        paths += synth.write_nsys(sc, Path(tmp.name) / f"wfbp_100_x{args.synthetic_steps}")
        # Eight ranks in one export (one process each): every table holds all of them.
        sc = replace(synth.SCENARIOS["wfbp_100"], steps=40, ranks=8, clock_offsets_ns=[0] * 8, rank_slowdown=[1.0] * 8)
        paths += synth.write_nsys(sc, Path(tmp.name) / "wfbp_100_8ranks", per_rank=False)
    tracelens_report(paths[0])  # imports and page cache, not counted
    for path in paths:
        rows = read_rows(path)
        base, ours = paired_times(path, args.runs)
        b, o = statistics.median(base), statistics.median(ours)
        print(f"{path.name}: {path.stat().st_size / 1e6:.1f} MB, {rows:,} rows; sqlite3 read {b * 1e3:.1f} ms, "
              f"tracelens parse+report {o * 1e3:.1f} ms; ratio {o / b:.2f} (medians of {args.runs}; "
              f"fastest runs {min(base) * 1e3:.1f} / {min(ours) * 1e3:.1f} ms, ratio {min(ours) / min(base):.2f})")
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
