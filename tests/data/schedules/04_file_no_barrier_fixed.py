"""Correct twin of 04_file_no_barrier_broken.py (2 ranks).

A dist.barrier() after rank 0's torch.save() and before rank 1's torch.load()
orders the write before the read, whatever delays either rank sees.
"""

import datetime
import os
import tempfile
import time

import torch
import torch.distributed as dist

port = os.environ.get("MASTER_PORT", "0")
path = os.path.join(tempfile.gettempdir(), f"sched04_ckpt_{port}.pt")
if int(os.environ.get("RANK", "0")) == 0 and os.path.exists(path):
    os.remove(path)  # stale file from an earlier run (removed before anyone joins)
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
dist.barrier()
if rank == 0:
    shard = torch.empty(4)
    dist.recv(shard, src=1)
    torch.save({"w": torch.ones(4), "opt_shard_1": shard}, path)
    dist.barrier()  # FIX: checkpoint is on disk before anyone reads it
else:
    req = dist.isend(torch.full((4,), 3.0), dst=0)
    time.sleep(0.2)  # stands in for rank 1's own evaluation
    dist.barrier()  # FIX: wait for rank 0's save
    ckpt = torch.load(path)
    assert torch.equal(ckpt["opt_shard_1"], torch.full((4,), 3.0))
    req.wait()
dist.barrier()
if rank == 0:
    os.remove(path)
dist.destroy_process_group()
