"""Polling a store key once with check() instead of waiting for it (3 ranks).

Rank 0 sends a data shard to rank 2, then to rank 1, and only then publishes the
step count in the c10d store. Workers build their model and read the value with a
non-blocking store.check() and a default: the pattern flagged in
https://github.com/ai-dynamo/nixl/pull/1907 ("check(): presence check; does not
block waiting for the key to appear") and the divergent per-rank exists() check of
https://github.com/KempnerInstitute/KempnerForge/issues/49.

Passes: the usual schedule. Rank 0 sets the key a few ms after its last send;
each worker spends ~0.2 s building its model before looking.
Fails: rank 1 held back >= 0.3 s before its dist.recv (rank 1's call 3;
init_process_group=1, barrier=2), or rank 0 held back >= 0.3 s before its second
dist.send (rank 0's call 4), or rank 0 or rank 1 slow by >= 0.3 s before every
call: the key appears after rank 2's check, rank 2 uses the default and the
all_reduce(MAX) agreement assert fires on rank 2.
"""

import datetime
import time

import torch
import torch.distributed as dist
from torch.distributed.distributed_c10d import _get_default_store

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
store = _get_default_store()
DEFAULT_STEPS = 4
dist.barrier()
if rank == 0:
    dist.send(torch.full((8,), 2.0), dst=2)
    dist.send(torch.full((8,), 1.0), dst=1)
    store.set("num_steps", "8")  # published only after every shard went out
    steps = 8
else:
    shard = torch.empty(8)
    dist.recv(shard, src=0)
    time.sleep(0.2)  # stands in for building the model
    # BUG: one non-blocking look; a late key silently yields the default
    steps = int(store.get("num_steps")) if store.check(["num_steps"]) else DEFAULT_STEPS
agreed = torch.tensor([steps])
dist.all_reduce(agreed, op=dist.ReduceOp.MAX)
assert agreed.item() == steps, f"rank {rank} runs {steps} steps, others {agreed.item()}"
dist.barrier()
dist.destroy_process_group()
