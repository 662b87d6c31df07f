"""Correct twin of 12_irecv_read_before_wait_broken.py (2 ranks).

Rank 1 calls req.wait() before touching the irecv buffer, so it always reads the
labels rank 0 sent, however late rank 0's send is.
"""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
dist.barrier()
if rank == 0:
    dist.send(torch.arange(8, dtype=torch.float32), dst=1)
else:
    labels = torch.zeros(8)
    req = dist.irecv(labels, src=0)
    time.sleep(0.15)  # stands in for the forward pass on the current batch
    req.wait()  # FIX: the buffer is only valid after wait()
    total = labels.sum().item()
    assert total == 28.0, f"used labels before they arrived (sum {total})"
dist.barrier()
dist.destroy_process_group()
