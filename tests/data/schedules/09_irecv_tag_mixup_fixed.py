"""Correct twin of 09_irecv_tag_mixup_broken.py (3 ranks).

The two streams use distinct tags (ACT=1, NORM=2), so each irecv can only match
its own kind of message, whichever sender is earlier and however late rank 0
posts its receives.
"""

import datetime
import time

import torch
import torch.distributed as dist

ACT = 1
NORM = 2  # FIX: distinct tag per stream

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
dist.barrier()
if rank == 0:
    time.sleep(0.4)  # rank 0 finishes its own micro-batch before looking at inputs
    act, norm = torch.empty(4), torch.empty(4)
    reqs = [dist.irecv(act, tag=ACT), dist.irecv(norm, tag=NORM)]
    for r in reqs:
        r.wait()
    assert torch.all(act == 1.0) and torch.all(norm == 7.0), (act, norm)
elif rank == 1:
    dist.isend(torch.full((4,), 1.0), dst=0, tag=ACT).wait()
else:
    time.sleep(0.15)  # stands in for computing the gradient norm
    dist.isend(torch.full((4,), 7.0), dst=0, tag=NORM).wait()
dist.barrier()
dist.destroy_process_group()
