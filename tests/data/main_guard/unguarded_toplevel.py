"""Mistake: launch() is called at the top level of the script, with no
`if __name__ == "__main__":` guard. Each rank imports this script to find
`allreduce_check`, which would call launch() again (the classic
multiprocessing spawn "RuntimeError: An attempt has been made to start a new
process before the current process has finished its bootstrapping phase").
"""
# expect: guard
import torch
import torch.distributed as dist

from sandbox import launch


def allreduce_check():
    rank = dist.get_rank()
    world = dist.get_world_size()
    t = torch.tensor([float(rank + 1)])
    dist.all_reduce(t)
    assert t.item() == world * (world + 1) / 2, t.item()


result = launch(allreduce_check, world_size=4, init=True)
print(result.verdict, result.diagnosis.summary)
print(f"RESULT ok={result.ok}")
