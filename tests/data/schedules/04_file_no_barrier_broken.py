"""Barrier-less read of a checkpoint file written by rank 0 (2 ranks).

Rank 1 ships its optimizer shard to rank 0 (isend, so it can keep working), rank 0
consolidates and torch.save()s the checkpoint, and rank 1 reloads it to resume.
Nothing orders rank 0's write before rank 1's read: the bug fixed by a barrier in
https://github.com/huggingface/transformers/pull/10685 (issue #10666),
https://github.com/allenai/OLMo/pull/234 and
https://github.com/KempnerInstitute/KempnerForge/pull/50.

Passes: the usual schedule. Rank 0 saves a few ms after the shard arrives;
rank 1 spends ~0.2 s on its own evaluation before loading.
Fails: rank 0 held back >= 0.3 s before its dist.recv (rank 0's call 3;
init_process_group=1, barrier=2), or rank 0 slow by >= 0.3 s before every call:
rank 1 opens the path before it exists (FileNotFoundError on rank 1).
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
else:
    req = dist.isend(torch.full((4,), 3.0), dst=0)
    time.sleep(0.2)  # stands in for rank 1's own evaluation
    ckpt = torch.load(path)  # BUG: no barrier between rank 0's save and this load
    assert torch.equal(ckpt["opt_shard_1"], torch.full((4,), 3.0))
    req.wait()
dist.barrier()
if rank == 0:
    os.remove(path)
dist.destroy_process_group()
