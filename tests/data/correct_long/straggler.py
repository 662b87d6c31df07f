"""A straggler that is slow but progressing (2 ranks).

Stresses: rank 1 does extra CPU work between collectives (a little every step,
more every 50th), so rank 0 spends most of its time blocked in all_reduce while
rank 1 is busy in its own code; once, rank 0 "writes a checkpoint" for 1.3 s
(a busy loop, then a sleep) while rank 1 waits at a barrier longer than the
default --hang-after. Neither is a hang: the other rank is always running its
own code, never blocked in a call. Every result is checked.
"""
# ranks: 2
import os
import time

import torch
import torch.distributed as dist

STEPS = 300


def busy(seconds):
    end = time.monotonic() + seconds
    x = 0
    while time.monotonic() < end:
        x += 1
    return x


def cpu_work(n):
    # deterministic arithmetic, its result is used
    s = 0
    for k in range(n):
        s = (s * 31 + k) % 1000003
    return s


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    ref = cpu_work(2000)
    for i in range(STEPS):
        if rank == 1:
            n = 20000 if i % 50 == 49 else 2000
            if cpu_work(n) < 0:
                raise RuntimeError("impossible")
        t = torch.tensor([float(ref % 97 + i)])
        dist.all_reduce(t)
        if t.item() != float(world * (ref % 97 + i)):
            raise RuntimeError(f"step {i}: {t.item()}")
        if i == STEPS // 2:
            # rank 0 saves a "checkpoint" while rank 1 waits at the barrier
            if rank == 0:
                busy(0.8)
                time.sleep(0.5)
            dist.barrier()
    print(f"rank {rank}: {STEPS} steps with a straggler ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
