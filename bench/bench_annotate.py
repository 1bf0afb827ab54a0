"""``tracelens annotate`` on one big Kineto trace: wall time and peak memory (all processes), beside
``tracelens report`` of the same file.

    python bench/bench_annotate.py               # big_10.json (bench_bigfile.py makes it once), ~474 MB
    python bench/bench_annotate.py --gzip        # the same trace gzipped (level 1)
    python bench/bench_annotate.py --copies 2

Three runs of each: ``report --format json`` and ``annotate`` with the cache off (TRACELENS_NO_CACHE=1: annotate
reads the file twice, once for the report and once for the exposed intervals), and ``annotate`` with a cold
cache of its own (the second reading is the cache's analysis layer), then warm (the Report and the analyses
from the cache: what is left is the copy of the trace itself). The output folder is removed after each run.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_bigfile import big_trace, gzipped  # noqa: E402
from bench_scale import TRACELENS, WORK, measure  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--gzip", action="store_true", help="measure the trace gzipped")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    path = big_trace(args.copies)
    size = path.stat().st_size          # of the JSON: what the peak is compared with, gzipped or not
    if args.gzip:
        path = gzipped(path)
    out, cache = WORK / "annotated", WORK / "annotate-cache"
    runs = [("report, no cache", [str(TRACELENS), "report", str(path), "--format", "json"], {"TRACELENS_NO_CACHE": "1"}),
            ("annotate, no cache", [str(TRACELENS), "annotate", str(path), "-o", str(out)], {"TRACELENS_NO_CACHE": "1"}),
            ("annotate, cold cache", [str(TRACELENS), "annotate", str(path), "-o", str(out)], {"cold": "1"}),
            ("annotate, warm cache", [str(TRACELENS), "annotate", str(path), "-o", str(out)], {})]
    print(f"| run | {path.name}: {size / 1e6:.0f} MB of JSON | wall | peak | peak / JSON |")
    for _ in range(args.rounds):
        for name, cmd, env in runs:
            shutil.rmtree(out, ignore_errors=True)
            if "cold" in env:
                shutil.rmtree(cache, ignore_errors=True)
            saved = dict(os.environ)
            os.environ.pop("TRACELENS_NO_CACHE", None)
            os.environ.update({"TRACELENS_CACHE": str(cache), **{k: v for k, v in env.items() if k != "cold"}})
            try:
                wall, peak, code = measure(cmd)
            finally:
                os.environ.clear()
                os.environ.update(saved)
            written = sum(p.stat().st_size for p in out.iterdir()) if out.is_dir() else 0
            print(f"| {name} | exit {code}, {written / 1e6:.0f} MB written | {wall:.1f} s | {peak / 1e6:.0f} MB | "
                  f"{peak / size:.2f}x |", flush=True)
    shutil.rmtree(out, ignore_errors=True)


if __name__ == "__main__":
    main()
