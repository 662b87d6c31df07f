"""Correct counterpart of the "logger rank returns right after init" reports:
the logger (rank 3) belongs to no group but still calls every new_group, in the
same order as everyone, then joins a world barrier and only then leaves. The
workers keep using their groups after it is gone.
"""
# world: 4
# kind: none
# culprits: none
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
T = datetime.timedelta(seconds=10)
LOGGER = 3

workers = dist.new_group([0, 1, 2], timeout=T)
front = dist.new_group([0, 1], timeout=T)
dist.barrier()

if rank == LOGGER:  # done: every group exists everywhere
    dist.destroy_process_group()
    print("OK")
    raise SystemExit(0)

for step in range(3):
    g = torch.ones(4) * (rank + 1)
    dist.all_reduce(g, group=workers)
    assert g[0].item() == 6.0, g
    if rank in (0, 1):
        dist.all_reduce(g, group=front)
        assert g[0].item() == 12.0, g
dist.destroy_process_group()
print("OK")
