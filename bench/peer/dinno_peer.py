#!/usr/bin/python3
"""The peer for decentralized training: seed 001's own way (javieryu/nn_distributed_training), every
graph node a model in one Python process (PyTorch 1.13), updated one after another, on the same
Fashion-MNIST hetero split, CNN, batch and graph as dtrain's configs/decentralized/fmnist_cycle10.yaml.
Written after the authors' optimizers/dsgd.py and dinno.py (read, not copied): DSGD mixes in place with
Metropolis weights then steps; CADMM (DiNNO) updates duals and takes primal Adam steps.

    /usr/bin/python3 bench/peer/dinno_peer.py --alg dsgd --rounds 200 --threads 1

Prints one JSON line: {"impl": "pytorch-dinno", "alg": ..., "nodes": ..., "rounds_per_second": ...},
timed over the rounds after a warm-up of 10, evaluation excluded (none is run).
"""
import argparse
import json
import time

import torch
import torch.nn as nn

from ddp_peer import load


def cnn():  # seed 001's MNISTConvNet: num_filters 3, kernel 5, linear width 64
    return nn.Sequential(nn.Conv2d(1, 3, 5, 1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(3 * 12 * 12, 64),
                         nn.ReLU(), nn.Linear(64, 10), nn.LogSoftmax(dim=1))


def cycle_weights(n):  # Metropolis on a cycle: 1/3 to each neighbour and to itself
    return {i: [((i - 1) % n, 1 / 3), ((i + 1) % n, 1 / 3)] for i in range(n)}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--alg", choices=["dsgd", "cadmm"], default="dsgd")
    p.add_argument("--nodes", type=int, default=10)
    p.add_argument("--rounds", type=int, default=200)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x, y = load("train")
    per = 10 // a.nodes
    data = [(x[(y >= i * per) & (y < (i + 1) * per)], y[(y >= i * per) & (y < (i + 1) * per)]) for i in range(a.nodes)]
    base = cnn()
    models = [cnn() for _ in range(a.nodes)]
    for m in models:
        m.load_state_dict(base.state_dict())
    params = [list(m.parameters()) for m in models]
    loss_fn = nn.NLLLoss()
    neighbours = cycle_weights(a.nodes)
    cursor = [0] * a.nodes
    duals = [torch.zeros(sum(q.numel() for q in params[0])) for _ in range(a.nodes)]

    def batch(i):
        xs, ys = data[i]
        s = cursor[i] % (len(ys) - a.batch)
        cursor[i] += a.batch
        return xs[s:s + a.batch], ys[s:s + a.batch]

    def dsgd_round():
        with torch.no_grad():  # in place, one node after another, as the authors' code
            for i in range(a.nodes):
                for k in range(len(params[i])):
                    params[i][k].mul_(1 / 3)
                    for j, w in neighbours[i]:
                        params[i][k].add_(w * params[j][k])
        for i in range(a.nodes):
            xb, yb = batch(i)
            loss_fn(models[i](xb), yb).backward()
            with torch.no_grad():
                for q in params[i]:
                    q.add_(-0.05 * q.grad)
                    q.grad.zero_()

    def cadmm_round(rho=0.5):
        ths = [torch.nn.utils.parameters_to_vector(params[i]).detach().clone() for i in range(a.nodes)]
        for i in range(a.nodes):
            js = [j for j, _ in neighbours[i]]
            thj = torch.stack([ths[j] for j in js])
            duals[i] += rho * torch.sum(ths[i] - thj, dim=0)
            reg = (thj + ths[i]) / 2.0
            opt = torch.optim.Adam(params[i], 0.005)
            for _ in range(2):
                opt.zero_grad()
                xb, yb = batch(i)
                th = torch.nn.utils.parameters_to_vector(params[i])
                loss = loss_fn(models[i](xb), yb) + torch.dot(th, duals[i]) + rho * torch.sum(
                    torch.square(torch.cdist(th.reshape(1, -1), reg)))
                loss.backward()
                opt.step()

    step = dsgd_round if a.alg == "dsgd" else cadmm_round
    for _ in range(10):
        step()
    start = time.perf_counter()
    for _ in range(a.rounds):
        step()
    seconds = time.perf_counter() - start
    print(json.dumps({"impl": "pytorch-dinno", "alg": a.alg, "nodes": a.nodes, "threads": a.threads,
                      "rounds": a.rounds, "rounds_per_second": a.rounds / seconds}))


if __name__ == "__main__":
    main()
