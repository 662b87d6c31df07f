"""Correct twin of 10_store_wait_short_timeout_broken.py (2 ranks).

Rank 0 waits for the acknowledgement with a timeout sized for real stragglers
(8 s, inside the 10 s process-group timeout), so a peer that is a second late is
waited for rather than reported as failed.
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
    req = dist.isend(torch.full((16,), 0.5), dst=1)
    # FIX: generous timeout, only a truly dead peer trips it
    store.wait(["weights_loaded_1"], datetime.timedelta(seconds=8))
    req.wait()
else:
    w = torch.empty(16)
    dist.recv(w, src=0)
    time.sleep(0.05)  # stands in for loading the weights into the model
    store.set("weights_loaded_1", "1")
    assert torch.all(w == 0.5)
dist.barrier()
dist.destroy_process_group()
