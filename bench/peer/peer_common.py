"""What every PyTorch peer in bench/peer/ does the same way: one process per rank, spawned, meeting
over Gloo on a free loopback port, rank 0's result handed back through a queue."""
import socket
import time

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


class StepTimer:
    """Times training steps as dtrain's trainer does: each step from the end of the one before (or
    from restart(), at an epoch's start) to the end of its update, the first
    min(10, max(1, total_steps / 10)) steps left out as warm-up."""

    def __init__(self, total_steps):
        self.warmup = min(10, max(1, total_steps // 10))
        self.steps = 0         # steps ended
        self.timed_steps = 0   # of them, after the warm-up
        self.seconds = 0.0     # their time
        self.restart()

    def restart(self):
        self._last = time.perf_counter()

    def step_done(self):
        now = time.perf_counter()
        self.steps += 1
        if self.steps > self.warmup:
            self.seconds += now - self._last
            self.timed_steps += 1
        self._last = now

    def per_second(self, samples_per_step):
        return self.timed_steps * samples_per_step / self.seconds if self.seconds > 0 else 0.0

    def step_ms(self):
        return 1e3 * self.seconds / self.timed_steps if self.timed_steps else 0.0
