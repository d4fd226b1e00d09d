#!/usr/bin/python3
"""The PyTorch peer of `parallel.strategy: zero` (bench/zero_throughput.sh): DistributedDataParallel
over Gloo with Adam, either whole on every rank (--impl ddp) or sharded by
torch.distributed.optim.ZeroRedundancyOptimizer (--impl zero1, ZeRO stage 1: each rank keeps and
updates the Adam state of its share of the parameters, then broadcasts them). Debian's
python3-torch 1.13 has no usable FSDP (torch.distributed.fsdp fails to import on Python 3.11), so
stages 2 and 3 have no PyTorch peer here.

The model is dtrain's resnet18 with the cifar stem (torchvision's layout, a 3x3 stem without
pooling, He-normal fan-out initialisation), on synthetic 3x32x32 images of 10 classes, the batch
per worker, the threads per worker and the steps the dtrain runs use; throughput is timed as
dtrain's trainer times it: samples per second over the steps after the warm-up
(min(10, max(1, steps / 10))), each step from fetching its batch to the end of the update.

    /usr/bin/python3 bench/peer/zero_peer.py --impl zero1 --workers 2 --threads 1 --batch 64 --steps 30

Prints one JSON line: {"impl": "pytorch-ddp" | "pytorch-zero1", "model", "workers", "steps",
"samples_per_second", "peak_rss_mib" (the largest rank's), "torch"}.
"""
import argparse
import json
import os
import resource

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer

from peer_common import StepTimer, run_ranks
from resnet_blocks import BasicBlock, conv


def resnet18(channels=3, classes=10):
    layers = [conv(channels, 64, 3, 1), nn.BatchNorm2d(64), nn.ReLU()]
    cin = 64
    for stage in range(4):
        planes = 64 << stage
        for b in range(2):
            layers.append(BasicBlock(cin, planes, 2 if stage > 0 and b == 0 else 1))
            cin = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes)]
    net = nn.Sequential(*layers)
    for m in net.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return net


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    world = args.workers
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    g = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.samples,), generator=g)
    net = nn.parallel.DistributedDataParallel(resnet18())
    if args.impl == "zero1":
        opt = ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.Adam, lr=args.lr)
    else:
        opt = torch.optim.Adam(net.parameters(), lr=args.lr)
    per_rank = args.samples // world
    steps_per_epoch = per_rank // args.batch
    timer = StepTimer(args.steps)
    epoch = 0
    while timer.steps < args.steps:
        order = torch.randperm(args.samples, generator=torch.Generator().manual_seed(args.seed + epoch))
        order = order[rank:per_rank * world:world]
        timer.restart()
        for b in range(steps_per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            inputs, targets = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad(set_to_none=True)
            F.cross_entropy(net(inputs), targets).backward()
            opt.step()
            timer.step_done()
            if timer.steps >= args.steps:
                break
        epoch += 1
    # Rank 0's time, as dtrain reports it (the ranks wait for each other every step).
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put({"impl": f"pytorch-{args.impl}", "model": "resnet18", "workers": world, "threads": args.threads,
                   "batch": args.batch, "steps": timer.steps,
                   "samples_per_second": timer.per_second(args.batch * world),
                   "peak_rss_mib": round(rss.item(), 1), "torch": torch.__version__})
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--impl", choices=["ddp", "zero1"], default="zero1")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--samples", type=int, default=8192)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    if args.workers < 2:
        raise SystemExit("zero_peer.py: --workers must be at least 2 (ZeroRedundancyOptimizer shards across ranks)")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print(json.dumps(run_ranks(worker, args, args.workers)), flush=True)


if __name__ == "__main__":
    main()
