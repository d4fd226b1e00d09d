"""What every PyTorch peer in bench/peer/ does the same way: one process per rank, spawned, meeting
over Gloo on a free loopback port, rank 0's result handed back through a queue."""
import socket

import torch.multiprocessing as mp


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_ranks(worker, args, nprocs):
    """Runs worker(rank, args, port, queue) in nprocs spawned processes and returns what rank 0 put
    on the queue."""
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.spawn(worker, args=(args, free_port(), queue), nprocs=nprocs, join=True)
    return queue.get()
