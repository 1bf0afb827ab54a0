"""A big NCCL debug log: the seconds and peak memory of parsing it and deciding its transport, against an
older version side by side.

    python bench/bench_nccl_log.py                          # 59 MB and 200 MB
    python bench/bench_nccl_log.py --before /tmp/tl-before  # also the tracelens package under that folder

The logs are one healthy IB/GDRDMA corpus log (verdict rdma_gdr) repeated to each size, the shape of a file
that many ranks' ``NCCL_DEBUG_FILE`` pointed at, written to a temporary folder. Each measurement is a new
process (parse, then the transport verdict) that measures its own wall time and peak RSS (``ru_maxrss``,
so the imports' memory is in it).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOG = ROOT.parent / "shared/corpus/nccl_logs/issue_nccl1189_ib_gdrdma_and_p2p_cumem_h20.log"

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, sys.argv[1])
from tracelens.parsers.nccl import debug_log
from tracelens.analyzers.run import transport
from tracelens.analyzers.thresholds import Thresholds
t0 = time.perf_counter()
log = debug_log.parse(sys.argv[2])
t1 = time.perf_counter()
t, _ = transport.analyze([log], [], [], Thresholds())
t2 = time.perf_counter()
print(json.dumps({"parse_s": t1 - t0, "verdict_s": t2 - t1, "verdict": t.verdict, "records": len(log.records),
                  "nccl_lines": log.nccl_lines,
                  "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def measure(package: Path, log: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", _CHILD, str(package), str(log)], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def _write(path: Path, one: bytes, times: int) -> None:
    """``one`` written ``times`` over, a megabyte at a time: a child's ru_maxrss starts from its parent's
    at the fork, so the parent never holds the whole log."""
    per = max(1, (1 << 20) // len(one))
    with open(path, "wb") as f:
        for start in range(0, times, per):
            f.write(one * min(per, times - start))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="59,200", help="log sizes in MB, comma-separated")
    ap.add_argument("--before", metavar="DIR", help="also the tracelens package under DIR (an older version)")
    args = ap.parse_args()
    one = LOG.read_bytes()
    versions = [("after", ROOT)] + ([("before", Path(args.before))] if args.before else [])
    with tempfile.TemporaryDirectory() as tmp:
        for mb in (int(s) for s in args.sizes.split(",")):
            path = Path(tmp) / f"nccl_{mb}mb.log"
            _write(path, one, mb * 10**6 // len(one))
            for name, package in versions:
                r = measure(package, path)
                print(f"{mb} MB {name}: parse {r['parse_s']:.2f} s, verdict {r['verdict_s']:.2f} s, peak RSS "
                      f"{r['peak_mb']:.0f} MB; {r['verdict']}, {r['records']} records, {r['nccl_lines']} NCCL lines",
                      flush=True)
            path.unlink()


if __name__ == "__main__":
    main()
