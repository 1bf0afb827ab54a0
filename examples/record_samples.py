"""Re-record the real samples in sample_traces/ with `tracelens collect`.

    python examples/record_samples.py gloo     # make record-gloo: CPU, 2 ranks, gloo over loopback
    python examples/record_samples.py cuda     # make record-cuda: one GPU, NCCL, world size 1

Each sample is a DDP run of examples/ddp_train.py under torchrun. The gloo set runs 7 training steps with
the profiler schedule wait=1, warmup=1, active=3 after the first step; the CUDA set runs 10 steps of a
larger model (8 x 2048 wide, batch 1024: about 134 MB of fp32 gradients, six 25 MB buckets) with
wait=2, warmup=1, active=4, so cuBLAS and NCCL start-up stay out of the recorded steps.

Only the traces, the manifest and (for CUDA) the NCCL debug logs are kept; the manifest's working directory
and run paths are made relative so the samples do not depend on where they were recorded.
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
GLOO = ["--backend", "gloo"]
GPU_MODEL = ["--backend", "nccl", "--width", "2048", "--batch", "1024"]
SETS = {
    # name: (ranks, collect --steps, training steps, job arguments, side folders kept)
    "gloo": {
        "gloo_sawtooth": (2, "1,1,3", 7, [*GLOO, "--bucket-cap-mb", "0.25"], ()),
        "gloo_one_bucket": (2, "1,1,3", 7, [*GLOO, "--bucket-cap-mb", "100"], ()),
        "gloo_no_sync": (2, "1,1,3", 7, [*GLOO, "--no-sync"], ()),
    },
    "cuda": {
        "cuda_nccl_ddp": (1, "2,1,4", 10, [*GPU_MODEL], ("nccl",)),
        "cuda_nccl_item": (1, "2,1,4", 10, [*GPU_MODEL, "--item-every-step"], ("nccl",)),
        "cuda_nccl_avg": (1, "2,1,4", 10, [*GPU_MODEL, "--no-sync", "--reduce-op", "avg"], ("nccl",)),
    },
}


def record(out: Path, ranks: int, steps: str, train_steps: int, args: list[str], keep: tuple[str, ...]) -> None:
    cmd = ["tracelens", "collect", "--out", str(out), "--force", "--no-report", "--steps", steps, "--",
           "torchrun", "--nproc-per-node", str(ranks), "examples/ddp_train.py", "--steps", str(train_steps),
           *args]
    print("+", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"})
    run = out if out.is_absolute() else ROOT / out
    for side in ("workers", ".tracelens", "nccl"):
        if side not in keep:
            shutil.rmtree(run / side, ignore_errors=True)
    manifest = json.loads((run / "manifest.json").read_text())
    text = json.dumps(manifest, indent=2).replace(str(run.resolve()), str(out)).replace(str(ROOT), ".")
    (run / "manifest.json").write_text(text + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("set", choices=sorted(SETS))
    p.add_argument("--out", type=Path, default=Path("sample_traces"), help="parent folder (default sample_traces)")
    a = p.parse_args(argv)
    for name, (ranks, steps, train_steps, args, keep) in SETS[a.set].items():
        record(a.out / name, ranks, steps, train_steps, args, keep)
    return 0


if __name__ == "__main__":
    sys.exit(main())
