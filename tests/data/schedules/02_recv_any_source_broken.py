"""recv without src matched to whichever sender comes first (3 ranks).

Rank 0 gathers one shard from each worker with dist.recv(t) and no src ("receive
from any source", https://github.com/pytorch/pytorch/pull/47137; its test had to
be rewritten in https://github.com/pytorch/pytorch/pull/49383 because
"recvAnySource can potentially recv from anywhere") and assumes the shards arrive
in rank order.

Passes: the usual schedule. Worker 1 sends right after the barrier, worker 2
first spends ~0.2 s preparing its shard, so worker 1's message matches first.
Fails: rank 1 held back >= 0.3 s before its dist.send (rank 1's call 3;
init_process_group=1, barrier=2), or rank 1 slow by >= 0.3 s before every call:
rank 2's shard is taken by the first recv, the concatenation is out of order and
rank 0's assert fires. No other single delay fails.
"""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
dist.barrier()
if rank == 0:
    shards = []
    for _ in range(1, world):
        t = torch.empty(2)
        dist.recv(t)  # BUG: any source; the return value (sender rank) is ignored
        shards.append(t)
    full = torch.cat(shards)
    expected = torch.cat([torch.full((2,), 10.0 * w) for w in range(1, world)])
    assert torch.equal(full, expected), f"shards out of order: {full.tolist()}"
else:
    time.sleep(0.2 * (rank - 1))  # stands in for preparing this worker's shard
    dist.send(torch.full((2,), 10.0 * rank), dst=0)
dist.barrier()
dist.destroy_process_group()
