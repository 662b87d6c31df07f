"""Correct twin of 02_recv_any_source_broken.py (3 ranks).

Rank 0 names the source of every recv, so each shard lands in its own slot
whatever order the workers' messages arrive in (any delay of any rank only
changes how long rank 0 waits).
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
    for src in range(1, world):
        t = torch.empty(2)
        dist.recv(t, src=src)  # FIX: match each shard to its sender
        shards.append(t)
    full = torch.cat(shards)
    expected = torch.cat([torch.full((2,), 10.0 * w) for w in range(1, world)])
    assert torch.equal(full, expected), f"shards out of order: {full.tolist()}"
else:
    time.sleep(0.2 * (rank - 1))  # stands in for preparing this worker's shard
    dist.send(torch.full((2,), 10.0 * rank), dst=0)
dist.barrier()
dist.destroy_process_group()
