"""Thousands of tiny all_reduces in a tight loop (2 ranks).

Stresses: a long run of very short collectives with nothing between them, the
pattern of the reported false hang ("rank 0 waits in all_reduce #3415 ... rank 1
is in all_reduce #3222"). The ranks are never more than one call apart in
reality; a judge that reads one rank's trace further than the other's could
think they are hundreds of calls apart. Every result is checked.
"""
# ranks: 2
import os

import torch
import torch.distributed as dist

STEPS = 4000


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo")
    t = torch.zeros(1)
    for i in range(STEPS):
        t.fill_(float(rank + i))
        dist.all_reduce(t)
        want = float(world * i + world * (world - 1) // 2)
        if t.item() != want:
            raise RuntimeError(f"step {i}: got {t.item()}, want {want}")
    print(f"rank {rank}: {STEPS} all_reduces ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
