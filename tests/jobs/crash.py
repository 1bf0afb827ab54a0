"""DDP job where one rank fails: `--fail-rank R --fail-at S` raises on rank R before step S."""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))

import torch.distributed as dist  # noqa: E402

import ddp_train  # noqa: E402

p = argparse.ArgumentParser()
p.add_argument("--fail-rank", type=int, default=1)
p.add_argument("--fail-at", type=int, default=3)
a, rest = p.parse_known_args()

original = ddp_train.torch.optim.SGD.step
count = {"n": 0}


def step(self, *args, **kwargs):
    count["n"] += 1
    if dist.get_rank() == a.fail_rank and count["n"] == a.fail_at:
        raise RuntimeError(f"rank {a.fail_rank} fails at step {a.fail_at} (on purpose)")
    return original(self, *args, **kwargs)


ddp_train.torch.optim.SGD.step = step
ddp_train.main(rest)
