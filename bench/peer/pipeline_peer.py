#!/usr/bin/python3
"""The PyTorch peer of `parallel.strategy: pipeline` with `schedule: gpipe` (bench/pipeline_compare.sh):
a hand-written GPipe in python3-torch 1.13, which has no pipeline for CPU processes of its own
(torch.distributed.pipeline.sync.Pipe runs on the devices of one process). One process per stage,
Gloo's send and recv between neighbours, every micro-batch's forward and then every backward,
SGD after the last.

The model is dtrain's mlp: Flatten, then (Linear, ReLU) per hidden width, then Linear to the
classes, cut into stages before the layers --cut names (dtrain's parallel.pipeline.cut_points). A
step takes --batch samples (synthetic, --shape C,H,W, 10 classes) in --micro-batches equal parts;
the loss is the batch's mean cross-entropy, so each micro-batch's is scaled by its share. Timed as
dtrain's trainer times it: samples per second on rank 0 over the steps after the warm-up
(min(10, max(1, steps / 10))).

    /usr/bin/python3 bench/peer/pipeline_peer.py --hidden 2048,2048,2048,2048 --cut 5 --batch 1024 --micro-batches 4

Prints one JSON line: {"impl": "pytorch-gpipe", "stages", "micro_batches", "batch", "steps",
"samples_per_second", "torch"}.
"""
import argparse
import json
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from peer_common import StepTimer, run_ranks


def mlp_layers(in_features, hidden, classes):
    layers, width = [nn.Flatten()], in_features
    for h in hidden:
        layers += [nn.Linear(width, h), nn.ReLU()]
        width = h
    layers.append(nn.Linear(width, classes))
    return layers


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    stages = len(args.cut) + 1
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=stages)
    torch.manual_seed(args.seed)  # every rank builds the whole model alike and keeps its stage
    c, h, w = args.shape
    layers = mlp_layers(c * h * w, args.hidden, 10)
    bounds = [0] + args.cut + [len(layers)]
    stage = nn.Sequential(*layers[bounds[rank]:bounds[rank + 1]])
    opt = torch.optim.SGD(stage.parameters(), lr=0.01)
    first, last = rank == 0, rank == stages - 1
    m_count = args.micro_batches
    micro = args.batch // m_count
    # The shapes crossing each cut, for the receives.
    probe = torch.zeros(micro, c, h, w)
    with torch.no_grad():
        shapes = []
        for s in range(stages):
            probe = nn.Sequential(*layers[bounds[s]:bounds[s + 1]])(probe)
            shapes.append(probe.shape)
    in_shape = (micro, c, h, w) if first else shapes[rank - 1]
    g = torch.Generator().manual_seed(args.seed)
    pool = 64
    data = torch.randn(pool * micro, c, h, w, generator=g)
    labels = torch.randint(0, 10, (pool * micro,), generator=g)
    timer = StepTimer(args.steps)
    for step in range(1, args.steps + 1):
        opt.zero_grad(set_to_none=True)
        inputs, outputs, losses, sends = [], [], [], []
        for m in range(m_count):
            at = ((step * m_count + m) % pool) * micro
            if first:
                x = data[at:at + micro]
            else:
                x = torch.empty(in_shape)
                dist.recv(x, rank - 1)
                x.requires_grad_()
            y = stage(x)
            inputs.append(x)
            if last:
                losses.append(F.cross_entropy(y, labels[at:at + micro]) / m_count)
            else:
                sends.append(dist.isend(y.detach(), rank + 1))
                outputs.append(y)
        for m in range(m_count):
            if last:
                losses[m].backward()
            else:
                grad = torch.empty(outputs[m].shape)
                dist.recv(grad, rank + 1)
                outputs[m].backward(grad)
            if not first:
                sends.append(dist.isend(inputs[m].grad, rank - 1))
        for work in sends:
            work.wait()
        opt.step()
        timer.step_done()
    if rank == 0:
        queue.put({"impl": "pytorch-gpipe", "stages": stages, "micro_batches": m_count, "batch": micro * m_count,
                   "threads": args.threads, "steps": args.steps,
                   "samples_per_second": timer.per_second(micro * m_count),
                   "torch": torch.__version__})
    dist.barrier()
    dist.destroy_process_group()


def ints(text):
    return [int(v) for v in text.strip("[]").split(",") if v.strip()]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hidden", type=ints, default=[1024] * 6, help="hidden widths, e.g. 2048,2048")
    p.add_argument("--shape", type=ints, default=[1, 28, 28], help="C,H,W of the synthetic inputs")
    p.add_argument("--cut", type=ints, required=True, help="first layer of stages 1..S-1, e.g. 7")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--micro-batches", type=int, default=4)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args()
    layers = 2 * len(args.hidden) + 2
    if any(b <= a for a, b in zip([0] + args.cut, args.cut + [layers])):
        raise SystemExit(f"pipeline_peer.py: --cut must increase strictly within [1, {layers - 1}]")
    if args.batch % args.micro_batches:
        raise SystemExit("pipeline_peer.py: --batch must be a multiple of --micro-batches")
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    print(json.dumps(run_ranks(worker, args, len(args.cut) + 1)), flush=True)


if __name__ == "__main__":
    main()
