#!/usr/bin/python3
"""The peer for decentralized training: DiNNO's own way (javieryu/nn_distributed_training), every
graph node a model in one Python process (PyTorch 1.13), updated one after another, on the same
Fashion-MNIST hetero split, CNN, batch and graph as dtrain's configs/decentralized/fmnist_cycle10.yaml.
Written after the authors' optimizers/dsgd.py and dinno.py (read, not copied): DSGD mixes in place with
Metropolis weights then steps; CADMM (DiNNO) updates duals and takes primal Adam steps.

    /usr/bin/python3 bench/peer/dinno_peer.py --alg dsgd --rounds 200 --threads 1

Prints one JSON line: {"impl": "pytorch-dinno", "alg": ..., "nodes": ..., "rounds_per_second": ...},
timed over the rounds after a warm-up of 10, evaluation excluded (none is run).

With --paper it runs DiNNO's paper schedule instead (dist_mnist_PAPER.yaml: rho 0.5 scaled by 1.0003
each round, the Adam rate from 0.005 to 0.0005 on a log scale over the rounds, shuffled batches as the
authors' DataLoader gives), no warm-up, and with --eval-every K prints a JSON line every K rounds with
the nodes' mean top-1 and the average model's top-1 on the first --test-size test images: the accuracy
the authors' own formulation reaches on this data, to set beside dtrain's.

    /usr/bin/python3 bench/peer/dinno_peer.py --alg cadmm --paper --rounds 2000 --eval-every 500

--seed N (default 0) seeds torch, which draws the initial weights and every batch permutation.
"""
import argparse
import json
import time

import torch
import torch.nn as nn

from ddp_peer import load


def cnn():  # DiNNO's MNISTConvNet: num_filters 3, kernel 5, linear width 64
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
    p.add_argument("--paper", action="store_true", help="DiNNO's rho and learning-rate schedules, shuffled batches")
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--test-size", type=int, default=2000)
    p.add_argument("--seed", type=int, default=0, help="torch's seed: the initial weights and the batch shuffling")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)  # randperm below draws from the same generator
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

    order = [torch.randperm(len(d[1])) for d in data]

    def batch(i):
        xs, ys = data[i]
        if a.paper:  # a fresh permutation per epoch of the node's data, as DataLoader(shuffle=True)
            n = len(ys) // a.batch
            if cursor[i] // a.batch % n == 0 and cursor[i] > 0:
                order[i] = torch.randperm(len(ys))
            s = (cursor[i] // a.batch % n) * a.batch
            cursor[i] += a.batch
            idx = order[i][s:s + a.batch]
            return xs[idx], ys[idx]
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

    state = {"round": 0, "rho": 0.5}

    def cadmm_round():
        rho, lr = 0.5, 0.005
        if a.paper:
            state["rho"] *= 1.0003
            rho = state["rho"]
            lr = 0.005 * (0.0005 / 0.005)**(state["round"] / max(1, a.rounds - 1))
        state["round"] += 1
        ths = [torch.nn.utils.parameters_to_vector(params[i]).detach().clone() for i in range(a.nodes)]
        for i in range(a.nodes):
            js = [j for j, _ in neighbours[i]]
            thj = torch.stack([ths[j] for j in js])
            duals[i] += rho * torch.sum(ths[i] - thj, dim=0)
            reg = (thj + ths[i]) / 2.0
            opt = torch.optim.Adam(params[i], lr)
            for _ in range(2):
                opt.zero_grad()
                xb, yb = batch(i)
                th = torch.nn.utils.parameters_to_vector(params[i])
                loss = loss_fn(models[i](xb), yb) + torch.dot(th, duals[i]) + rho * torch.sum(
                    torch.square(torch.cdist(th.reshape(1, -1), reg)))
                loss.backward()
                opt.step()

    step = dsgd_round if a.alg == "dsgd" else cadmm_round
    if a.paper:
        evaluate_paper(a, step, models, load)
        return
    for _ in range(10):
        step()
    start = time.perf_counter()
    for _ in range(a.rounds):
        step()
    seconds = time.perf_counter() - start
    print(json.dumps({"impl": "pytorch-dinno", "alg": a.alg, "nodes": a.nodes, "threads": a.threads,
                      "rounds": a.rounds, "rounds_per_second": a.rounds / seconds}))


def evaluate_paper(a, step, models, load):
    xt, yt = load("t10k")
    xt, yt = xt[:a.test_size], yt[:a.test_size]

    def top1(m):
        with torch.no_grad():
            return (m(xt).argmax(1) == yt).float().mean().item()

    average = cnn()
    for k in range(1, a.rounds + 1):
        step()
        if a.eval_every and (k % a.eval_every == 0 or k == a.rounds):
            with torch.no_grad():
                for name, q in average.named_parameters():
                    q.copy_(sum(dict(m.named_parameters())[name] for m in models) / len(models))
            nodes = [top1(m) for m in models]
            print(json.dumps({"impl": "pytorch-dinno", "alg": a.alg, "round": k, "node_top1_mean": sum(nodes) / len(nodes),
                              "node_top1_min": min(nodes), "node_top1_max": max(nodes), "average_top1": top1(average)}),
                  flush=True)


if __name__ == "__main__":
    main()
