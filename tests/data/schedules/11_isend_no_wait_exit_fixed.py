"""Correct twin of 11_isend_no_wait_exit_broken.py (2 ranks).

Rank 0 waits on its isend request before tearing down the group, so it stays
alive until rank 1 has actually received the metrics, however late rank 1 posts
its recv.
"""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
dist.barrier()
if rank == 0:
    metrics = torch.tensor([0.25, 0.75])
    req = dist.isend(metrics, dst=1)
    time.sleep(0.25)  # stands in for writing rank 0's own logs
    req.wait()  # FIX: the send must complete before the group goes away
else:
    time.sleep(0.05)  # stands in for rank 1's final bookkeeping
    metrics = torch.empty(2)
    dist.recv(metrics, src=0)
    assert torch.allclose(metrics, torch.tensor([0.25, 0.75]))
dist.destroy_process_group()
