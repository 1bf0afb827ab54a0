"""Re-record the real CPU gloo samples in sample_traces/ with `tracelens collect` (make record-gloo).

Each is a 2-rank DDP run of examples/ddp_train.py under torchrun (gloo over loopback): 7 training steps,
the profiler schedule wait=1, warmup=1, active=3 after the first step. Only the traces and the manifest are
kept; the manifest's working directory and run paths are made relative so the samples do not depend on
where they were recorded.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RUNS = {
    "gloo_sawtooth": ["--bucket-cap-mb", "0.25"],
    "gloo_one_bucket": ["--bucket-cap-mb", "100"],
    "gloo_no_sync": ["--no-sync"],
}


def record(name: str, args: list[str]) -> None:
    out = Path("sample_traces") / name
    cmd = ["tracelens", "collect", "--out", str(out), "--force", "--no-report", "--steps", "1,1,3", "--",
           "torchrun", "--nproc-per-node", "2", "examples/ddp_train.py", "--steps", "7", *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    run = ROOT / out
    for side in ("workers", ".tracelens", "nccl"):
        shutil.rmtree(run / side, ignore_errors=True)
    manifest = json.loads((run / "manifest.json").read_text())
    text = json.dumps(manifest, indent=2).replace(str(run.resolve()), str(out)).replace(str(ROOT), ".")
    (run / "manifest.json").write_text(text + "\n")


def main() -> int:
    for name, args in RUNS.items():
        record(name, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
