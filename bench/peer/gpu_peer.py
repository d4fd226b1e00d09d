#!/usr/bin/env python3
"""The peer dtrain is measured against on a GPU: a plain PyTorch 2.x training loop with the settings a
performance-minded user has (autocast, channels_last for convolutions, cudnn.benchmark, the default
TF32 settings), on the model `dtrain train` builds, layer for layer, with the same batch and optimizer
(SGD, momentum 0.9, lr 0.1, no weight decay: dtrain's optim.weight_decay default), synthetic data.

    python3 bench/peer/gpu_peer.py --model resnet50 --stem imagenet --shape 3,224,224 --batch 128 \
        --samples 1024 --steps 60 --precision bf16 --mode eager
    /usr/bin/python3 bench/peer/gpu_peer.py --device cpu --model resnet18 --batch 8 --steps 4   # a dry run

The data are --samples random samples held in host memory (pinned on a GPU), taken batch after batch
in order and copied with non_blocking=True, so the host never waits for the copy. --mode ddp wraps the
model in DistributedDataParallel on one rank (nccl on a GPU, gloo on the CPU), which still all-reduces
every bucket. Nothing is read back from the GPU inside the loop: the last loss is read after the timing.
Timed: the steps after the warm-up, between two torch.cuda.synchronize() calls. Prints one JSON line:
{"impl", "model", "batch", "precision", "mode", "samples_per_second", "max_memory_allocated_bytes",
"steps", "loss", "parameters"}.
"""
import argparse
import contextlib
import json
import math
import os
import tempfile
import time
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from resnet_blocks import BasicBlock, Bottleneck, conv


# ResNet-18/50 as dtrain's models/ResNet.cpp builds them: a "cifar" stem (3x3, no pooling) or an
# "imagenet" stem (7x7 stride 2, max pool) before the blocks.
def resnet(depth, stem, channels, classes, dropout):
    block, blocks = (Bottleneck, [3, 4, 6, 3]) if depth == 50 else (BasicBlock, [2, 2, 2, 2])
    if stem == "cifar":
        layers = [conv(channels, 64, 3, 1), nn.BatchNorm2d(64), nn.ReLU()]
    else:
        layers = [conv(channels, 64, 7, 2), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, stride=2, padding=1)]
    cin = 64
    for stage, count in enumerate(blocks):
        planes = 64 << stage
        for b in range(count):
            layers.append(block(cin, planes, 2 if stage > 0 and b == 0 else 1))
            cin = planes * block.expansion
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten()]
    if dropout > 0:
        layers.append(nn.Dropout(dropout))
    layers.append(nn.Linear(cin, classes))
    model = nn.Sequential(*layers)
    for m in model.modules():  # torchvision's initialisation, as dtrain's
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        elif isinstance(m, nn.BatchNorm2d):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)
    return model


# dtrain's transformer classifier on images (models/Transformers.cpp, TransformerBlocks.cpp): each image
# row is a token, pre-norm encoder blocks whose attention is written out (matmul, softmax, matmul) as
# dtrain's is, mean pooling over tokens, a final norm and a Linear head.
class SelfAttention(nn.Module):
    def __init__(self, dim, heads, dropout):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.projection = nn.Linear(dim, dim)
        self.attention_dropout = nn.Dropout(dropout)

    def forward(self, x):
        n, t, dim = x.shape
        head_dim = dim // self.heads
        # (N, T, 3*dim) -> 3 x (N, heads, T, head_dim)
        q, k, v = self.qkv(x).view(n, t, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
        weights = self.attention_dropout(torch.softmax(scores, -1))
        return self.projection(torch.matmul(weights, v).transpose(1, 2).reshape(n, t, dim))


class EncoderBlock(nn.Module):
    def __init__(self, dim, heads, hidden, dropout):
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(dim), SelfAttention(dim, heads, dropout)
        self.norm2, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.dropout(self.attention(self.norm1(x)))
        hidden = F.gelu(self.fc1(self.norm2(x)))
        return x + self.dropout(self.fc2(self.dropout(hidden)))


class RowEmbedding(nn.Module):  # (N, C, H, W) -> (N, H, dim)
    def __init__(self, channels, height, width, dim, dropout):
        super().__init__()
        self.projection = nn.Linear(channels * width, dim)
        self.position = nn.Parameter(torch.empty(1, height, dim).normal_(0.0, 0.02))
        self.dropout = nn.Dropout(dropout)

    def forward(self, images):
        n, c, h, w = images.shape
        rows = images.permute(0, 2, 1, 3).reshape(n, h, c * w)
        return self.dropout(self.projection(rows) + self.position)


class ClassifierHead(nn.Module):  # (N, T, dim) -> (N, classes)
    def __init__(self, dim, classes):
        super().__init__()
        self.norm, self.fc = nn.LayerNorm(dim), nn.Linear(dim, classes)

    def forward(self, x):
        return self.fc(self.norm(x).mean(1))


def transformer(args, channels, height, width):
    if args.dim % args.heads:
        raise SystemExit(f"--heads {args.heads} must divide --dim {args.dim}")
    hidden = round(args.mlp_ratio * args.dim)
    blocks = [EncoderBlock(args.dim, args.heads, hidden, args.dropout) for _ in range(args.depth)]
    return nn.Sequential(RowEmbedding(channels, height, width, args.dim, args.dropout), *blocks,
                         ClassifierHead(args.dim, args.classes))


def make_model(args, shape):
    channels, height, width = shape
    if args.model in ("resnet18", "resnet50"):
        return resnet(int(args.model[6:]), args.stem, channels, args.classes, args.dropout)
    return transformer(args, channels, height, width)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", choices=["resnet18", "resnet50", "transformer"], default="resnet18")
    p.add_argument("--stem", choices=["cifar", "imagenet"], default="cifar", help="resnet's first layers")
    p.add_argument("--shape", default="3,32,32", help="one sample, C,H,W (dtrain's data.synthetic_shape)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--dim", type=int, default=64, help="transformer: model.dim")
    p.add_argument("--depth", type=int, default=2, help="transformer: model.depth")
    p.add_argument("--heads", type=int, default=4, help="transformer: model.heads")
    p.add_argument("--mlp-ratio", type=float, default=2.0, help="transformer: model.mlp_ratio")
    p.add_argument("--dropout", type=float, default=0.0, help="model.dropout")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--samples", type=int, default=0, help="samples held in host memory (default 4 batches)")
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=-1,
                   help="untimed first steps; default dtrain's: min(10, max(1, steps / 10))")
    p.add_argument("--precision", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument("--channels-last", choices=["auto", "on", "off"], default="auto",
                   help="auto: on for a resnet in bf16 or fp16")
    p.add_argument("--mode", choices=["eager", "ddp"], default="eager")
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: PyTorch's default)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    if args.warmup < 0:
        args.warmup = min(10, max(1, args.steps // 10))
    if args.steps <= args.warmup:
        raise SystemExit(f"--steps {args.steps}: expected more than the {args.warmup} warm-up steps")
    return args


def init_ddp(device):
    """A world of one over nccl (gloo on the CPU), met through a file store: no port to choose."""
    store = os.path.join(tempfile.mkdtemp(prefix="gpu_peer-"), "store")
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{store}",
                            rank=0, world_size=1)


def require_autocast(device, dtype):
    """Refuses a precision this PyTorch cannot autocast to on the device, where it would only warn
    and train in float32 (PyTorch 1.x autocasts the CPU to bfloat16 alone)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.autocast(device.type, dtype=dtype)
    refusals = [str(w.message) for w in caught if "autocast" in str(w.message).lower()]
    if refusals:
        raise SystemExit(f"--precision: PyTorch {torch.__version__} does not autocast {device.type} to {dtype}: "
                         + " ".join(refusals))


def main():
    args = parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    if args.device == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit("--device cuda: this PyTorch sees no GPU; use --device cpu for a dry run")
        torch.cuda.set_device(0)
        torch.backends.cudnn.benchmark = True
    device = torch.device(args.device, 0) if args.device == "cuda" else torch.device("cpu")
    dtype = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}[args.precision]
    if dtype is not None:
        require_autocast(device, dtype)
    shape = [int(s) for s in args.shape.split(",")]
    resnet_model = args.model.startswith("resnet")
    channels_last = args.channels_last == "on" or (args.channels_last == "auto" and resnet_model and dtype is not None)
    memory_format = torch.channels_last if channels_last else torch.contiguous_format

    model = make_model(args, shape).to(device, memory_format=memory_format)
    parameters = sum(p.numel() for p in model.parameters())
    if args.mode == "ddp":
        init_ddp(device)
        model = nn.parallel.DistributedDataParallel(model, device_ids=[0] if device.type == "cuda" else None)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scaler = None
    if dtype is torch.float16:
        scaler = torch.amp.GradScaler(args.device) if hasattr(torch.amp, "GradScaler") else \
            torch.cuda.amp.GradScaler()

    # A batch is a slice along N: a view of the pinned tensor, still pinned and (in channels_last) dense,
    # so its copy is asynchronous and keeps the layout.
    samples = max(args.samples, args.batch) if args.samples else 4 * args.batch
    base = torch.randn([min(samples, 64)] + shape)  # the values do not change the time
    images = base.repeat(math.ceil(samples / base.shape[0]), 1, 1, 1)[:samples]
    images = images.contiguous(memory_format=memory_format)
    labels = torch.randint(args.classes, (samples,))
    if device.type == "cuda":
        images, labels = images.pin_memory(), labels.pin_memory()
    batches = samples // args.batch

    def step(i):
        b = i % batches
        x = images[b * args.batch:(b + 1) * args.batch].to(device, non_blocking=True)
        x = x.contiguous(memory_format=memory_format)  # already so: the pinned copy keeps the strides
        y = labels[b * args.batch:(b + 1) * args.batch].to(device, non_blocking=True)
        with torch.autocast(device.type, dtype=dtype) if dtype else contextlib.nullcontext():
            loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        if scaler is not None:  # its step reads the overflow flag on the host, as PyTorch users have it
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()
            optimizer.step()
        return loss

    def synchronize():
        if device.type == "cuda":
            torch.cuda.synchronize()

    model.train()
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    for i in range(args.warmup):
        step(i)
    synchronize()
    start = time.perf_counter()
    for i in range(args.warmup, args.steps):
        loss = step(i)
    synchronize()
    seconds = time.perf_counter() - start
    timed = args.steps - args.warmup
    print(json.dumps({
        "impl": "pytorch", "model": args.model, "batch": args.batch, "precision": args.precision,
        "mode": args.mode, "samples_per_second": timed * args.batch / seconds,
        "max_memory_allocated_bytes": torch.cuda.max_memory_allocated() if device.type == "cuda" else None,
        "steps": args.steps, "loss": loss.item(), "parameters": parameters,
        "channels_last": bool(channels_last), "torch": torch.__version__}), flush=True)
    if args.mode == "ddp":
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
