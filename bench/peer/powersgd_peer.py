#!/usr/bin/python3
"""The peer of bench/powersgd_compare.sh: PyTorch DistributedDataParallel over Gloo (Debian's
python3-torch 1.13) with its communication hooks, plain, fp16_compress_hook and powerSGD_hook at
rank r, training dtrain's resnet18 (the cifar stem: a 3x3 convolution without pooling; torchvision's
blocks) on CIFAR-shaped synthetic data with SGD, timed as `dtrain train` times: milliseconds per step
over the steps after a warm-up.

    /usr/bin/python3 bench/peer/powersgd_peer.py --method powersgd --rank 4 --workers 2 --steps 100

Prints one JSON line: {"impl": "pytorch-ddp", "method": ..., "rank": ..., "workers": ..., "steps": ...,
"step_ms": ..., "elements_per_step": ..., "plain_elements_per_step": ...}; the element counts are the
hook's own compression statistics (PowerSGDState.compression_stats) for the compressed steps.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.distributed.algorithms.ddp_comm_hooks.default_hooks as default_hooks
import torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook as powersgd
import torch.nn as nn
import torch.nn.functional as F

from peer_common import StepTimer, run_ranks


class BasicBlock(nn.Module):
    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.down = None
        if stride != 1 or inp != planes:
            self.down = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (x if self.down is None else self.down(x)))


def resnet18(classes=10):
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU()]
    inp = 64
    for stage, planes in enumerate([64, 128, 256, 512]):
        for b in range(2):
            layers.append(BasicBlock(inp, planes, 2 if stage > 0 and b == 0 else 1))
            inp = planes
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(inp, classes)]
    return nn.Sequential(*layers)


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=args.workers)
    model = resnet18()
    # One bucket by default: with resnet18's two 25 MB buckets, powerSGD_hook over Gloo aborted
    # ("op.preamble.length <= op.nbytes": two ranks paired messages of different sizes), most likely
    # because it issues a bucket's P all-reduce from the callback of its first all-reduce while the
    # autograd thread issues the next bucket's, in an order that can differ between ranks.
    net = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=args.bucket_mb)
    state = None
    if args.method == "fp16":
        net.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif args.method == "powersgd":
        state = powersgd.PowerSGDState(process_group=None, matrix_approximation_rank=args.rank,
                                       start_powerSGD_iter=max(2, args.start), min_compression_rate=2,
                                       use_error_feedback=True, warm_start=True, random_seed=args.seed)
        net.register_comm_hook(state, powersgd.powerSGD_hook)
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    g = torch.Generator().manual_seed(args.seed + rank)
    x = torch.randn(args.batch * 4, 3, 32, 32, generator=g)
    y = torch.randint(0, 10, (args.batch * 4,), generator=g)
    timer = StepTimer(args.steps)
    for step in range(1, args.steps + 1):
        lo = (step % 4) * args.batch
        opt.zero_grad()
        F.cross_entropy(net(x[lo:lo + args.batch]), y[lo:lo + args.batch]).backward()
        opt.step()
        timer.step_done()
    result = None
    if rank == 0:
        plain = sum(p.numel() for p in model.parameters())
        result = {"impl": "pytorch-ddp", "method": args.method, "rank": args.rank if state else None,
                  "workers": args.workers, "threads": args.threads, "batch": args.batch, "steps": args.steps,
                  "step_ms": timer.step_ms(), "plain_elements_per_step": plain,
                  "torch": torch.__version__}
        if state is not None:
            rate, before, after = state.compression_stats()
            compressed_steps = max(1, args.steps - max(2, args.start))
            result["elements_per_step"] = after / compressed_steps
            result["compression_rate"] = rate
    dist.barrier()
    dist.destroy_process_group()
    if result is not None:
        queue.put(result)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--method", choices=["none", "fp16", "powersgd"], default="powersgd")
    p.add_argument("--rank", type=int, default=4, help="PowerSGD's matrix approximation rank")
    p.add_argument("--start", type=int, default=2, help="start_powerSGD_iter (PyTorch needs at least 2)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--bucket-mb", type=float, default=100, help="DDP's bucket_cap_mb (one bucket for resnet18)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print(json.dumps(run_ranks(worker, args, args.workers)), flush=True)


if __name__ == "__main__":
    main()
