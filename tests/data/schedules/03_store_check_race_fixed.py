"""Correct twin of 03_store_check_race_broken.py (3 ranks).

Workers read the step count with a blocking store.get(), which waits (up to the
10 s store timeout) until rank 0 has set the key, so a late rank 0 or a late
rank 1 only delays the workers; every rank runs the same number of steps.
"""

import datetime
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
store = _get_default_store()
dist.barrier()
if rank == 0:
    dist.send(torch.full((8,), 2.0), dst=2)
    dist.send(torch.full((8,), 1.0), dst=1)
    store.set("num_steps", "8")
    steps = 8
else:
    shard = torch.empty(8)
    dist.recv(shard, src=0)
    time.sleep(0.2)  # stands in for building the model
    steps = int(store.get("num_steps"))  # FIX: get() blocks until the key is set
agreed = torch.tensor([steps])
dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
assert agreed.item() == steps, f"rank {rank} runs {steps} steps, others {agreed.item()}"
dist.barrier()
dist.destroy_process_group()
