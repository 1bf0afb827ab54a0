"""Record real CPU-only DDP traces (gloo over loopback) for the overlap-pattern tests.

    torchrun --nproc-per-node 2 tests/recordings/ddp_gloo.py --bucket-cap-mb 0.25 --out sample_traces/gloo_sawtooth

Three shapes are bundled under sample_traces/ (see the README there and docs/metrics.md):
small buckets (``--bucket-cap-mb 0.25``: buckets reduced while backward runs), one bucket larger than the
model (``--bucket-cap-mb 100``: everything reduced after backward), and ``--no-sync`` (gradients kept local
by ``no_sync()``, then one explicit flat all-reduce after backward). Needs torch (``pip install -e .[collect]``).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def model(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--bucket-cap-mb", type=float, default=25.0)
    p.add_argument("--no-sync", action="store_true", help="no_sync() backward, then one flat all_reduce")
    p.add_argument("--width", type=int, default=448)     # 8 x (448^2 + 448) floats ~ 6.4 MB of gradients
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", required=True)
    a = p.parse_args()

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = DDP(model(a.width, a.depth), bucket_cap_mb=a.bucket_cap_mb)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(a.batch, a.width)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)

    def save(prof: torch.profiler.profile) -> None:
        tmp = out / f".rank{rank}.json.gz.tmp.json.gz"
        prof.export_chrome_trace(str(tmp))
        os.replace(tmp, out / f"rank{rank}.json.gz")

    schedule = torch.profiler.schedule(wait=1, warmup=1, active=3, repeat=1)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], schedule=schedule,
                                on_trace_ready=save) as prof:
        for _ in range(5):
            opt.zero_grad(set_to_none=True)
            if a.no_sync:
                with net.no_sync():
                    net(x).square().mean().backward()
                flat = torch.cat([q.grad.reshape(-1) for q in net.parameters()])
                dist.all_reduce(flat)
                flat /= dist.get_world_size()
                offset = 0
                for q in net.parameters():
                    q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                    offset += q.numel()
            else:
                net(x).square().mean().backward()
            opt.step()
            prof.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
