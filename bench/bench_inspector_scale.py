"""NCCL Inspector logs of thousands of ranks: the seconds and peak memory of a report of them, and that it names
the late rank and the slow link.

    python bench/bench_inspector_scale.py                        # 256, 1,024, 4,096 ranks x 2,000 collectives
    python bench/bench_inspector_scale.py --sizes 16384x250      # RANKSxCOLLECTIVES, comma-separated
    python bench/bench_inspector_scale.py --profile 256x2000     # where the memory goes (tracemalloc, slower)
    python bench/bench_inspector_scale.py --plain                # logs without timestamps (matched by exec times)

The logs are tests/fixtures/synth/inspector_scale.py's (hosts of 8, a world all-reduce and a host-pair
all-reduce in turn, rank 5 late by 300 µs at every collective, host pair 0's link 4x slow), one file per rank,
written under TL_BENCH_DIR (default /tmp/tl-inspector-scale) by a process of their own and deleted after each
size. The late rank is read from the straggler finding, the slow link from the slow-link finding. Each report
is a new process (``api.report`` of the folder, no cache) that measures its own wall time
and peak RSS (``ru_maxrss``: the imports, about 35 MB, included; a process started by one that held more
starts from that, hence the generator's own process).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = Path(os.environ.get("TL_BENCH_DIR", "/tmp/tl-inspector-scale"))

_WRITE = """
import sys, time
sys.path.insert(0, sys.argv[1] + "/tests")
from fixtures.synth import inspector_scale as g
t0 = time.perf_counter()
g.write(g.ScaleRun(ranks=int(sys.argv[2]), collectives=int(sys.argv[3])), sys.argv[4], verbose=sys.argv[5] == "1")
print(time.perf_counter() - t0)
"""

_REPORT = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, sys.argv[1] + "/tests")
profile = sys.argv[5] == "1"
if profile:
    import tracemalloc
    tracemalloc.start(8)
from fixtures.synth import inspector_scale as g
from tracelens import api
run = g.ScaleRun(ranks=int(sys.argv[2]), collectives=int(sys.argv[3]))
t0 = time.perf_counter()
rep = api.report([sys.argv[4]], cache=False)
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
top = []
if profile:
    snap = tracemalloc.take_snapshot()
    _, traced = tracemalloc.get_traced_memory()
    top = [f"{s.size / 1e6:8.1f} MB  {s.traceback.format()[-1].strip()}" for s in
           snap.statistics("traceback")[:12]]
    top.insert(0, f"traced peak {traced / 1e6:.0f} MB")
links = [d.evidence for d in rep.diagnoses if d.id == "slow-link"]
print(json.dumps({"wall_s": wall, "peak_mb": peak, "matched": rep.cross_rank.matching.matched,
                  "unmatched": rep.cross_rank.matching.unmatched,
                  "culprit": [d.rank for d in rep.diagnoses if d.id == "straggler"],
                  "slow_links": [e["comm"] for e in links],
                  "busbw": [[round(e["busbw_gbps"], 3), round(e["peers_busbw_gbps"], 3)] for e in links],
                  "lost_ms": [e["lost_ns"] / 1e6 for e in links],
                  "want": [run.late_rank, run.comm_id(run.slow_pair)], "top": top}))
"""


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="256x2000,1024x2000,4096x2000", help="RANKSxCOLLECTIVES, comma-separated")
    ap.add_argument("--profile", action="store_true", help="tracemalloc's biggest allocations still held at the end")
    ap.add_argument("--keep", action="store_true", help="leave the logs in TL_BENCH_DIR")
    ap.add_argument("--plain", action="store_true", help="logs without kernel timestamps (the plugin's default)")
    args = ap.parse_args()
    for size in args.sizes.split(","):
        ranks, colls = (int(x) for x in size.lower().split("x"))
        folder = WORK / f"n{ranks}x{colls}{'-plain' if args.plain else ''}"
        if not (folder / "nccl-inspector-scale").is_dir():
            shutil.rmtree(folder, ignore_errors=True)
            verbose = "0" if args.plain else "1"
            wrote = float(subprocess.run([sys.executable, "-c", _WRITE, str(ROOT), str(ranks), str(colls), str(folder),
                                          verbose], check=True, capture_output=True, text=True).stdout)
            print(f"{ranks} x {colls}: wrote {_du(folder) / 1e9:.2f} GB in {wrote:.1f} s", flush=True)
        out = subprocess.run([sys.executable, "-c", _REPORT, str(ROOT), str(ranks), str(colls), str(folder),
                              "1" if args.profile else "0"], check=True, capture_output=True, text=True).stdout
        r = json.loads(out)
        ok = r["culprit"] == [r["want"][0]] and r["slow_links"] == [r["want"][1]] and r["unmatched"] == 0
        print(f"{ranks} x {colls}: report {r['wall_s']:.1f} s, peak RSS {r['peak_mb']:.0f} MB "
              f"({r['peak_mb'] * 1024 / ranks:.0f} kB a rank); matched {r['matched']}, culprit {r['culprit']}, "
              f"slow link {r['slow_links']} (busbw and its peers' {r['busbw']} GB/s, {r['lost_ms']} ms lost): "
              f"{'named right' if ok else 'WRONG, want ' + str(r['want'])}", flush=True)
        for line in r["top"]:
            print("   ", line)
        if not args.keep:
            shutil.rmtree(folder)


if __name__ == "__main__":
    main()
