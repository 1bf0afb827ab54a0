"""A small DDP training job for trying tracelens (and for its end-to-end tests).

    tracelens collect -- torchrun --nproc-per-node 2 examples/ddp_train.py --bucket-cap-mb 0.25

It never mentions the profiler: ``tracelens collect`` profiles it from outside. On CPU it uses the gloo
backend over loopback; with one GPU per rank, NCCL. The model is an MLP of ``--depth`` square layers
(the default, 8 x 448 wide, has about 1.6 M parameters: 6.4 MB of fp32 gradients).

Shapes worth comparing:
  --bucket-cap-mb 0.25      many small buckets, all-reduced while backward runs (sawtooth)
  --bucket-cap-mb 100       one bucket bigger than the model, all-reduced after backward (two-phase)
  --no-sync                 gradients kept local by no_sync(), then one explicit flat all_reduce (two-phase)
  --item-every-step         a host sync (loss.item()) in every step
  --no-sync --reduce-op avg the explicit all_reduce averages (NCCL only): with one rank, NCCL then runs a
                            real kernel, where an in-place sum over one rank does no device work at all
  --slow-rank 1 --slow-ms 40
                            rank 1 sleeps 40 ms before every forward (a host gap: a slow data loader, say), so
                            the other ranks wait for it at the all-reduces
"""

from __future__ import annotations

import argparse
import os
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP


def mlp(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers)


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    # 20: `tracelens collect`'s default schedule (--steps 10,2,5) needs 1 + 10 + 2 + 5 = 18 for a full trace.
    p.add_argument("--steps", type=int, default=20, help="training steps (default 20)")
    p.add_argument("--bucket-cap-mb", type=float, default=25.0, help="DDP bucket size (default 25)")
    p.add_argument("--no-sync", action="store_true", help="no_sync() backward, then one flat all_reduce")
    p.add_argument("--reduce-op", choices=("sum", "avg"), default="sum",
                   help="the --no-sync all_reduce: sum then divide (default), or ReduceOp.AVG (NCCL only)")
    p.add_argument("--item-every-step", action="store_true", help="call loss.item() after every backward")
    p.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps --slow-ms before every forward")
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--width", type=int, default=448)
    p.add_argument("--depth", type=int, default=8)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--backend", choices=("auto", "gloo", "nccl"), default="auto",
                   help="auto: nccl when CUDA is available, else gloo")
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse(argv)
    cuda = torch.cuda.is_available() and a.backend != "gloo"
    backend = a.backend if a.backend != "auto" else ("nccl" if cuda else "gloo")
    if "RANK" not in os.environ:   # plain `python ddp_train.py`: a world of one
        os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT="29533")
    dist.init_process_group(backend)
    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    torch.manual_seed(0)
    net = DDP(mlp(a.width, a.depth).to(device), bucket_cap_mb=a.bucket_cap_mb,
              device_ids=[device.index] if cuda else None)
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    x = torch.randn(a.batch, a.width, device=device)
    slow = a.slow_ms / 1000 if dist.get_rank() == a.slow_rank else 0.0
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        if slow:
            time.sleep(slow)
        if a.no_sync:
            with net.no_sync():
                loss = net(x).square().mean()
                loss.backward()
            flat = torch.cat([q.grad.reshape(-1) for q in net.parameters()])
            if a.reduce_op == "avg":
                dist.all_reduce(flat, op=dist.ReduceOp.AVG)
            else:
                dist.all_reduce(flat)
                flat /= dist.get_world_size()
            offset = 0
            for q in net.parameters():
                q.grad.copy_(flat[offset:offset + q.numel()].view_as(q))
                offset += q.numel()
        else:
            loss = net(x).square().mean()
            loss.backward()
        if a.item_every_step:
            loss.item()
        opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
