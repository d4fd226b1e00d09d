#!/usr/bin/python3
"""The PyTorch 2.x peer of dtrain's `transformer` language model on a 2 x 2 device mesh
(bench/tp_compare.sh): four ranks over Gloo on the CPU, in one of two arrangements,

  --mesh tp    tensor parallel 2 x FSDP 2: init_device_mesh("cpu", (2, 2), ("dp_shard", "tp")),
               parallelize_module on "tp" (ColwiseParallel for q, k, v and fc1, RowwiseParallel for the
               attention's projection and fc2), then fully_shard (FSDP2) on "dp_shard", each block and
               the root;
  --mesh hsdp  HSDP 2 x 2: fully_shard on the 2-D mesh ("dp_replicate", "dp_shard"), each block and the
               root.

The model is dtrain's (models/Transformers.cpp, TransformerBlocks.cpp): token embedding plus learned
positions, pre-norm blocks (LayerNorm, causal self-attention, projection; LayerNorm, fc1, GELU, fc2),
a final LayerNorm and an LM head. dtrain's attention has one fused qkv Linear of 3*dim outputs; here
q, k and v are three Linear layers of dim outputs, the same arithmetic (the fused weight is the three
stacked), because ColwiseParallel splits a Linear's outputs into contiguous halves, and half of a fused
(q | k | v) is not a set of whole heads. Data: the same character-level text file dtrain reads
(data.text_path), the vocabulary its distinct bytes in order, windows of seq_len characters; every rank
of one tensor-parallel group takes the same batch. Adam, fp32, no dropout, threads per rank as given.
Throughput is timed as dtrain's trainer times it (peer_common.StepTimer): samples per second of the
whole job, the samples being batch x data-parallel ranks.

    python3 bench/peer/transformer_lm_peer.py --mesh tp --text FILE --batch 16 --seq-len 64 --steps 30

--check STEPS compares the arrangement with one process instead (the same batch on every rank, STEPS
Adam steps, losses within 1e-4 relative) and prints {"mesh", "losses", "one_process", "ok"}.

Otherwise prints one JSON line: {"impl", "mesh", "workers", "steps", "samples_per_second", "step_ms", "parameters", "loss"
(rank 0's last step), "peak_rss_mib" (the largest rank's), "torch"}.
"""
import argparse
import copy
import json
import math
import os
import resource
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

try:
    from torch.distributed.fsdp import fully_shard
except ImportError:  # PyTorch before 2.6 keeps FSDP2 here
    from torch.distributed._composable.fsdp import fully_shard

from peer_common import StepTimer, run_ranks


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.head_dim = dim // heads
        self.wq, self.wk, self.wv = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        n, t, _ = x.shape
        # (N, T, dim / tp) -> (N, local heads, T, head_dim): under tensor parallelism each rank holds
        # its heads only, so the head count is what its shard of q has.
        q, k, v = (w(x).view(n, t, -1, self.head_dim).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        future = torch.ones(t, t, dtype=torch.bool).triu(1)
        weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        context = (weights @ v).transpose(1, 2).reshape(n, t, -1)
        return self.proj(context)


class Block(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.norm1, self.attention = nn.LayerNorm(dim), Attention(dim, heads)
        self.norm2, self.fc1, self.fc2 = nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.Linear(hidden, dim)

    def forward(self, x):
        x = x + self.attention(self.norm1(x))
        return x + self.fc2(F.gelu(self.fc1(self.norm2(x))))


class TransformerLM(nn.Module):
    def __init__(self, vocab, seq_len, dim, depth, heads, hidden):
        super().__init__()
        self.tokens = nn.Embedding(vocab, dim)
        self.position = nn.Parameter(torch.empty(1, seq_len, dim).normal_(0.0, 0.02))
        nn.init.normal_(self.tokens.weight, 0.0, 0.02)
        self.blocks = nn.ModuleList(Block(dim, heads, hidden) for _ in range(depth))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, vocab)

    def forward(self, tokens):  # (N, T) -> (N, T, vocab)
        x = self.tokens(tokens) + self.position[:, : tokens.size(1)]
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def parallelize(model, arrangement):
    """Applies the arrangement's parallelisms in torchtitan's order (tensor parallel, then FSDP);
    returns the mesh dimension that data is split over."""
    if arrangement == "tp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
        plan = {"attention.wq": ColwiseParallel(), "attention.wk": ColwiseParallel(),
                "attention.wv": ColwiseParallel(), "attention.proj": RowwiseParallel(),
                "fc1": ColwiseParallel(), "fc2": RowwiseParallel()}
        for block in model.blocks:
            parallelize_module(block, mesh["tp"], plan)
        shard_mesh, data_mesh = mesh["dp_shard"], mesh["dp_shard"]
    else:
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_replicate", "dp_shard"))
        shard_mesh, data_mesh = mesh, mesh[("dp_replicate", "dp_shard")]._flatten("dp")
    for block in model.blocks:
        fully_shard(block, mesh=shard_mesh)
    fully_shard(model, mesh=shard_mesh)
    return data_mesh


def load_text(path, seq_len):
    """dtrain's data.dataset text: the vocabulary is the bytes present, in order; the training part
    is the first nine tenths; sample i is the window at i * seq_len and its successor."""
    data = open(path, "rb").read()
    vocab = sorted(set(data))
    lookup = torch.full((256,), -1, dtype=torch.long)
    lookup[torch.tensor(vocab)] = torch.arange(len(vocab))
    ids = lookup[torch.frombuffer(bytearray(data[: len(data) - len(data) // 10]), dtype=torch.uint8).long()]
    windows = (ids.numel() - 1) // seq_len
    return ids, windows, len(vocab)


def adam_losses(model, inputs, targets, steps, lr):
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(inputs).flatten(0, 1), targets.flatten())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def check(model, args, ids, queue):
    """The arrangement against one process: every rank steps on the same batch, so the parallel
    model's losses must be the whole model's, step after step, to within float rounding."""
    reference = copy.deepcopy(model)
    parallelize(model, args.mesh)
    positions = torch.arange(4).unsqueeze(1) * args.seq_len + torch.arange(args.seq_len)
    inputs, targets = ids[positions], ids[positions + 1]
    got = adam_losses(model, inputs, targets, args.check, args.lr)
    want = adam_losses(reference, inputs, targets, args.check, args.lr)
    if dist.get_rank() == 0:
        queue.put({"mesh": args.mesh, "losses": got, "one_process": want,
                   "ok": all(abs(a - b) <= 1e-4 * abs(b) for a, b in zip(got, want))})


def worker(rank, args, port, queue):
    # The model's output is the LM head's, a view of its matrix product; nothing changes it in place.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=4)
    ids, windows, vocab = load_text(args.text, args.seq_len)
    model = TransformerLM(vocab, args.seq_len, args.dim, args.depth, args.heads, round(args.mlp_ratio * args.dim))
    parameters = sum(p.numel() for p in model.parameters())
    if args.check:
        check(model, args, ids, queue)
        dist.destroy_process_group()
        return
    data_mesh = parallelize(model, args.mesh)
    data_rank, data_ranks = data_mesh.get_local_rank(), data_mesh.size()
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    offsets = torch.arange(args.seq_len)
    per_rank = windows // data_ranks
    steps_per_epoch = per_rank // args.batch
    timer = StepTimer(args.steps)
    epoch = 0
    while timer.steps < args.steps:
        order = torch.randperm(windows, generator=torch.Generator().manual_seed(args.seed + epoch))
        order = order[data_rank:per_rank * data_ranks:data_ranks]
        timer.restart()
        for b in range(steps_per_epoch):
            positions = (order[b * args.batch:(b + 1) * args.batch] * args.seq_len).unsqueeze(1) + offsets
            inputs, targets = ids[positions], ids[positions + 1]
            opt.zero_grad(set_to_none=True)
            logits = model(inputs)
            loss = F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
            loss.backward()
            opt.step()
            timer.step_done()
            if timer.steps >= args.steps:
                break
        epoch += 1
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0], dtype=torch.float64)
    dist.all_reduce(rss, op=dist.ReduceOp.MAX)
    if rank == 0:
        queue.put({"impl": "pytorch-" + {"tp": "tp2-fsdp2", "hsdp": "hsdp2x2"}[args.mesh], "mesh": args.mesh,
                   "workers": 4, "threads": args.threads, "batch": args.batch, "steps": timer.steps,
                   "samples_per_second": timer.per_second(args.batch * data_ranks),
                   "step_ms": round(timer.step_ms(), 2), "parameters": parameters, "loss": round(loss.item(), 4),
                   "peak_rss_mib": round(rss.item(), 1), "torch": torch.__version__})
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mesh", choices=["tp", "hsdp"], required=True)
    p.add_argument("--text", required=True, help="the text file (dtrain's data.text_path)")
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--batch", type=int, default=16, help="samples per data-parallel rank")
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--mlp-ratio", type=float, default=4.0)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--check", type=int, default=0, metavar="STEPS",
                   help="instead of timing, compare STEPS Adam steps on one batch with one process; exit 1 if they differ")
    args = p.parse_args()
    if args.heads % 2 or args.dim % args.heads:
        raise SystemExit("transformer_lm_peer.py: --heads must be even (two tensor-parallel ranks) and divide --dim")
    # Set before the ranks import torch: Debian's torch reaches OpenBLAS through libblas.so.3 and cannot
    # set its threads, which OpenBLAS takes from these at load time.
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    result = run_ranks(worker, args, 4)
    print(json.dumps(result), flush=True)
    if args.check and not result["ok"]:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
