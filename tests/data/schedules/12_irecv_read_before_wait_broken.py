"""Reading an irecv buffer before wait() (2 ranks).

Rank 1 prefetches the next labels from rank 0 with dist.irecv, does its own work
and uses the buffer, calling wait() only afterwards: "reading from tensor after
dist.irecv() will result in undefined behaviour" until wait() returns
(https://github.com/pytorch/tutorials/issues/3009).

Passes: the usual schedule. Rank 0 sends right after the barrier; the data lands
within a few ms, rank 1 reads it after ~0.15 s of work.
Fails: rank 0 held back >= 0.2 s before its dist.send (rank 0's call 3;
init_process_group=1, barrier=2), or rank 0 slow by >= 0.2 s before every call:
rank 1 reads the initial zeros and its assert fires.
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
    total = labels.sum().item()  # BUG: buffer used before req.wait()
    req.wait()
    assert total == 28.0, f"used labels before they arrived (sum {total})"
dist.barrier()
dist.destroy_process_group()
