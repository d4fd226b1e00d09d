#!/usr/bin/python3
"""The peer dtrain is measured against: PyTorch DistributedDataParallel over Gloo (Debian's
python3-torch 1.13), training the same model on the same Fashion-MNIST data with the same batch,
optimizer and threads per worker as `dtrain train`, timed the same way: samples per second of the
whole job over the training steps after a warm-up, evaluation excluded.

    /usr/bin/python3 bench/peer/ddp_peer.py --model mlp --workers 2 --threads 1 --epochs 1

Prints one JSON line: {"impl": "pytorch-ddp", "model": ..., "workers": ..., "samples_per_second": ...,
"test_top1": ..., "steps": ...}. With --workers 1 it trains without DDP (the single-process peer).
"""
import argparse
import gzip
import json
import os

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from peer_common import StepTimer, run_ranks

ROOT = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530  # Fashion-MNIST training set, as dtrain computes it


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(split):
    images = read_idx(f"{ROOT}/{split}-images-idx3-ubyte.gz")
    labels = read_idx(f"{ROOT}/{split}-labels-idx1-ubyte.gz")
    x = torch.from_numpy(images.copy()).float().div_(255).sub_(MEAN).div_(STD).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


def make_model(name):
    if name == "mlp":  # 784-256-128-10, as dtrain's mlp with hidden [256, 128]
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128), nn.ReLU(),
                             nn.Linear(128, 10))
    if name == "lenet5":  # as dtrain's lenet5: padding 2 for 28x28 inputs, ReLU, max pooling
        return nn.Sequential(nn.Conv2d(1, 6, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(6, 16, 5),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(400, 120), nn.ReLU(),
                             nn.Linear(120, 84), nn.ReLU(), nn.Linear(84, 10))
    raise SystemExit(f"unknown model {name}; expected mlp or lenet5")


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    world = args.workers
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    x, y = load("train")
    model = make_model(args.model)
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=args.momentum)
    # DistributedSampler's split: a seeded permutation per epoch, every world-th sample from rank.
    per_rank = len(x) // world
    steps_per_epoch = per_rank // args.batch
    timer = StepTimer(steps_per_epoch * args.epochs)
    for epoch in range(args.epochs):
        g = torch.Generator().manual_seed(args.seed + epoch)
        order = torch.randperm(len(x), generator=g)[rank:per_rank * world:world]
        timer.restart()
        for b in range(steps_per_epoch):
            idx = order[b * args.batch:(b + 1) * args.batch]
            inputs, targets = x.index_select(0, idx), y.index_select(0, idx)
            opt.zero_grad()
            loss = F.cross_entropy(net(inputs), targets)
            loss.backward()
            opt.step()
            timer.step_done()
    result = None
    if rank == 0:
        xt, yt = load("t10k")
        model.eval()
        with torch.no_grad():
            correct = sum((model(xt[i:i + 1000]).argmax(1) == yt[i:i + 1000]).sum().item()
                          for i in range(0, len(xt), 1000))
        result = {"impl": "pytorch-ddp" if world > 1 else "pytorch", "model": args.model, "workers": world,
                  "threads": args.threads, "batch": args.batch, "steps": timer.steps,
                  "samples_per_second": timer.per_second(args.batch * world),
                  "test_top1": correct / len(xt), "torch": torch.__version__}
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if queue is not None and result is not None:
        queue.put(result)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="mlp")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.01)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    if args.workers == 1:
        result = worker(0, args, 0, None)
    else:
        result = run_ranks(worker, args, args.workers)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
