"""Mistake: a sweep over world sizes at the top level of the script, calling
launch() once per size, with no `if __name__ == "__main__":` guard. Every rank
that imports this script to find `barrier_then_gather` would re-run the whole
sweep.
"""
# expect: guard
import torch
import torch.distributed as dist

from sandbox import launch


def barrier_then_gather():
    world = dist.get_world_size()
    dist.barrier()
    out = [torch.zeros(1) for _ in range(world)]
    dist.all_gather(out, torch.tensor([float(dist.get_rank())]))
    assert [int(x.item()) for x in out] == list(range(world))


all_ok = True
for world_size in (2, 3, 4):
    result = launch(barrier_then_gather, world_size=world_size, init=True)
    print(f"world_size={world_size}: {result.verdict} - {result.diagnosis.summary}")
    all_ok = all_ok and result.ok

print(f"RESULT ok={all_ok}")
