"""A long loop on 4 ranks with a rotating straggler.

Stresses: 4 ranks on a 2-core machine, so at any moment up to half the ranks
are descheduled; a different rank does a little extra CPU work each step, and
a barrier every 100 steps. Small all_reduces and all_gathers, results checked.
"""
# ranks: 4
import os

import torch
import torch.distributed as dist

STEPS = 600


def cpu_work(n):
    s = 0
    for k in range(n):
        s = (s * 131 + k) % 65521
    return s


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    for i in range(STEPS):
        if i % world == rank:
            cpu_work(3000)
        t = torch.tensor([float(rank + 1), float(i)])
        dist.all_reduce(t)
        if t.tolist() != [float(world * (world + 1) // 2), float(world * i)]:
            raise RuntimeError(f"step {i}: {t.tolist()}")
        if i % 3 == 0:
            outs = [torch.zeros(1) for _ in range(world)]
            dist.all_gather(outs, torch.tensor([float(rank * i)]))
            if [o.item() for o in outs] != [float(r * i) for r in range(world)]:
                raise RuntimeError(f"step {i}: all_gather {[o.item() for o in outs]}")
        if i % 100 == 99:
            dist.barrier()
    print(f"rank {rank}: {STEPS} steps on {world} ranks ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
