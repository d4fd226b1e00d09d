#!/usr/bin/python3
"""The PyTorch peer of dtrain's `albert` (bench/albert_compare.sh): ALBERT's sequence classifier in
plain torch (Debian's python3-torch 1.13 has no transformers package), one process or
DistributedDataParallel over Gloo, on the CPU.

The model is dtrain's (models/Albert.cpp), module for module: BERT's embeddings at width E (word,
position and token type 0, LayerNorm), a Linear E -> H, ONE post-norm layer (self-attention with the
padding masked out of the keys, dense, LayerNorm; FFN with tanh GELU, LayerNorm) applied num_layers
times, the pooler (dense + tanh on position 0) and the classifier (dropout 0.1 + Linear). Sizes:
base (H 768, E 128, 12 layers, 12 heads, FFN 3072) or large (H 1024, 24 layers, 16 heads, FFN 4096).
Weights ~ N(0, 0.02) as dtrain's, not the same numbers. Data: dtrain's data.dataset synthetic with
synthetic_vocab, token ids drawn uniformly from [1, vocab) and random labels (the throughput does
not depend on them). AdamW (lr, weight decay 0.01), fp32, threads per worker as given. Timed as
dtrain's trainer times it (peer_common.StepTimer): samples per second of the whole job.

    OMP_NUM_THREADS=1 /usr/bin/python3 bench/peer/albert_peer.py --workers 2 --batch 8 --seq-len 128 --steps 8

Prints one JSON line: {"impl" ("pytorch" or "pytorch-ddp"), "workers", "batch", "seq_len", "steps",
"samples_per_second", "step_ms", "parameters", "loss" (rank 0's last step), "torch"}.
"""
import argparse
import json
import math
import os

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

from peer_common import StepTimer, run_ranks

SIZES = {  # E, H, layers, heads, FFN
    "tiny": (16, 32, 2, 2, 64),
    "base": (128, 768, 12, 12, 3072),
    "large": (128, 1024, 24, 16, 4096),
}


class Embeddings(nn.Module):
    def __init__(self, vocab, positions, e):
        super().__init__()
        self.word_embeddings = nn.Embedding(vocab, e, padding_idx=0)
        self.position_embeddings = nn.Embedding(positions, e)
        self.token_type_embeddings = nn.Embedding(2, e)
        self.LayerNorm = nn.LayerNorm(e, eps=1e-12)

    def forward(self, ids):  # (N, T) -> (N, T, E)
        positions = torch.arange(ids.size(1)).unsqueeze(0)
        x = self.word_embeddings(ids) + self.token_type_embeddings(torch.zeros_like(positions))
        return self.LayerNorm(x + self.position_embeddings(positions))


class Attention(nn.Module):
    def __init__(self, h, heads):
        super().__init__()
        self.heads = heads
        self.query, self.key, self.value = nn.Linear(h, h), nn.Linear(h, h), nn.Linear(h, h)
        self.dense = nn.Linear(h, h)
        self.LayerNorm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, padding):  # (N, T, H), (N, T) bool
        n, t, h = x.shape
        d = h // self.heads
        q, k, v = (w(x).view(n, t, self.heads, d).transpose(1, 2) for w in (self.query, self.key, self.value))
        scores = q @ k.transpose(-1, -2) / math.sqrt(d)
        scores = scores.masked_fill(padding.view(n, 1, 1, t), torch.finfo(scores.dtype).min)
        context = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(n, t, h)
        return self.LayerNorm(x + self.dense(context))


class Layer(nn.Module):
    def __init__(self, h, heads, ffn):
        super().__init__()
        self.attention = Attention(h, heads)
        self.ffn, self.ffn_output = nn.Linear(h, ffn), nn.Linear(ffn, h)
        self.full_layer_layer_norm = nn.LayerNorm(h, eps=1e-12)

    def forward(self, x, padding):
        a = self.attention(x, padding)
        return self.full_layer_layer_norm(self.ffn_output(F.gelu(self.ffn(a), approximate="tanh")) + a)


class Albert(nn.Module):
    def __init__(self, size, vocab, positions=512, classes=2):
        super().__init__()
        e, h, self.layers, heads, ffn = SIZES[size]
        self.embeddings = Embeddings(vocab, positions, e)
        self.embedding_hidden_mapping_in = nn.Linear(e, h)
        self.albert_layer = Layer(h, heads, ffn)  # one layer, applied self.layers times
        self.pooler = nn.Linear(h, h)
        self.dropout, self.classifier = nn.Dropout(0.1), nn.Linear(h, classes)
        with torch.no_grad():
            for m in self.modules():
                if isinstance(m, nn.Linear):
                    m.weight.normal_(0.0, 0.02)
                    m.bias.zero_()
                elif isinstance(m, nn.Embedding):
                    m.weight.normal_(0.0, 0.02)
            self.embeddings.word_embeddings.weight[0].zero_()

    def forward(self, ids):  # (N, T) -> (N, classes)
        padding = ids.eq(0)
        x = self.embedding_hidden_mapping_in(self.embeddings(ids))
        for _ in range(self.layers):
            x = self.albert_layer(x, padding)
        return self.classifier(self.dropout(torch.tanh(self.pooler(x[:, 0]))))


def worker(rank, args, port, queue):
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    world = args.workers
    if world > 1:
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    model = Albert(args.size, args.vocab)
    net = nn.parallel.DistributedDataParallel(model) if world > 1 else model
    opt = torch.optim.AdamW(net.parameters(), lr=args.lr, weight_decay=0.01)
    g = torch.Generator().manual_seed(args.seed + rank)
    timer = StepTimer(args.steps)
    while timer.steps < args.steps:
        ids = torch.randint(1, args.vocab, (args.batch, args.seq_len), generator=g)
        labels = torch.randint(0, 2, (args.batch,), generator=g)
        opt.zero_grad()
        loss = F.cross_entropy(net(ids), labels)
        loss.backward()
        opt.step()
        timer.step_done()
    result = {"impl": "pytorch-ddp" if world > 1 else "pytorch", "model": "albert-" + args.size, "workers": world,
              "threads": args.threads, "batch": args.batch, "seq_len": args.seq_len, "steps": timer.steps,
              "samples_per_second": timer.per_second(args.batch * world), "step_ms": round(timer.step_ms(), 1),
              "parameters": sum(p.numel() for p in model.parameters()), "loss": round(loss.item(), 4),
              "torch": torch.__version__}
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
    if queue is not None and rank == 0:
        queue.put(result)
    return result


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size", choices=sorted(SIZES), default="base")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=8, help="samples per worker")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--vocab", type=int, default=30000)
    p.add_argument("--steps", type=int, default=8)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    # Debian's torch reaches OpenBLAS through libblas.so.3 and cannot set its threads, which OpenBLAS
    # takes from these at load time (the spawned ranks inherit them).
    os.environ.setdefault("OMP_NUM_THREADS", str(args.threads))
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))
    result = worker(0, args, 0, None) if args.workers == 1 else run_ranks(worker, args, args.workers)
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
