"""One big Kineto trace: wall time and peak memory (all processes) of ``tracelens report`` on it.

    python bench/bench_bigfile.py              # writes /tmp/tl-bench/big/big_<copies>.json once, then measures
    python bench/bench_bigfile.py --copies 10  # the 54 MB corpus trace's events 10 times over (~530 MB)
    python bench/bench_bigfile.py --gzip       # the same trace gzipped (big_<copies>.json.gz, level 1)

The trace is the corpus's 54 MB trace with its events repeated ``copies`` times, each repeat shifted later by
the trace's span (steps renumbered, correlation ids kept apart), uncompressed: what the decoder must hold is
the raw JSON itself. Never committed.
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_scale import CORPUS, TRACELENS, WORK, measure  # noqa: E402

SOURCE = CORPUS / "hta/df_index_resolver/df_index_resolver.json.gz"
_STEP = re.compile(r"ProfilerStep#(\d+)")


def big_trace(copies: int) -> Path:
    out = WORK / "big" / f"big_{copies}.json"
    if out.exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    doc = json.loads(gzip.decompress(SOURCE.read_bytes()))
    events = doc["traceEvents"]
    timed = [e for e in events if isinstance(e.get("ts"), (int, float))]
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - min(e["ts"] for e in timed) + 1000
    steps = 1 + max((int(m.group(1)) for e in events if (m := _STEP.fullmatch(str(e.get("name", ""))))), default=0)
    body = []
    for k in range(copies):
        for e in events:
            if k and e.get("ph") == "M":
                continue
            e = dict(e)
            if "ts" in e and isinstance(e["ts"], (int, float)):
                e["ts"] = e["ts"] + k * span
            m = _STEP.fullmatch(str(e.get("name", "")))
            if m:
                e["name"] = f"ProfilerStep#{int(m.group(1)) + k * steps}"
            if isinstance(e.get("args"), dict):
                args = e["args"] = dict(e["args"])
                for key in ("correlation", "External id"):
                    if isinstance(args.get(key), int):
                        args[key] += k * 10**7
            if isinstance(e.get("id"), int):
                e["id"] += k * 10**7
            body.append(e)
    doc["traceEvents"] = body
    tmp = out.with_suffix(".tmp")
    with open(tmp, "w") as fh:
        json.dump(doc, fh)
    tmp.rename(out)
    return out


def gzipped(path: Path) -> Path:
    out = path.with_name(path.name + ".gz")
    if not out.exists():
        tmp = out.with_suffix(".tmp")
        with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=1) as dst:
            while block := src.read(16 << 20):
                dst.write(block)
        tmp.rename(out)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--copies", type=int, default=10)
    ap.add_argument("--jobs", default=None, help="TRACELENS_JOBS for the run (0: decode in the main process)")
    ap.add_argument("--gzip", action="store_true", help="measure the trace gzipped")
    args = ap.parse_args()
    path = big_trace(args.copies)
    size = path.stat().st_size          # of the JSON: what the peak is compared with, gzipped or not
    if args.gzip:
        path = gzipped(path)
    import os

    if args.jobs is not None:
        os.environ["TRACELENS_JOBS"] = args.jobs
    os.environ["TRACELENS_NO_CACHE"] = "1"     # every run decodes: the warm cache would answer all but the first
    wall, peak, code = measure([str(TRACELENS), "report", str(path), "--format", "json"])
    print(f"| {path.name} | {size / 1e6:.0f} MB of JSON | jobs={args.jobs} | {wall:.1f} s | {peak / 1e6:.0f} MB | "
          f"{peak / size:.2f}x | exit {code} |")


if __name__ == "__main__":
    main()
