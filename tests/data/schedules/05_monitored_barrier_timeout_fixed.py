"""Correct twin of 05_monitored_barrier_timeout_broken.py (2 ranks).

The monitored_barrier timeout is set well above any legitimate straggling (here
8 s, inside the 10 s process-group timeout), so a rank that is a second late is
waited for instead of being reported as hung.
"""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
dist.barrier()
w = torch.ones(4)
for epoch in range(2):
    g = torch.full((4,), float(rank + 1))
    dist.all_reduce(g)
    w -= 0.1 * g
    time.sleep(0.1)  # stands in for the end-of-epoch bookkeeping
    # FIX: timeout sized for slow ranks, only a real hang trips it
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=8))
assert torch.allclose(w, torch.full((4,), 1.0 - 0.1 * 3 * 2))
dist.destroy_process_group()
