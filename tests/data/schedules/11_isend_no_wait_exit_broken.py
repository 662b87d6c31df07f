"""Fire-and-forget isend: the sender leaves without wait() (2 ranks).

Rank 0 hands its final metrics to rank 1 with dist.isend, keeps the request but
never waits on it, and tears down the group. Gloo moves the bytes only once rank
1's recv is posted, so the send can still be pending when rank 0 exits.
Unwaited isends are undefined (https://github.com/pytorch/tutorials/issues/3009);
https://github.com/pytorch/gloo/issues/308 shows unwaited gloo isends hanging or
crashing. (Dropping the request object altogether cancels the send at once.)

Passes: the usual schedule. Rank 1 posts its recv after ~0.05 s of bookkeeping
while rank 0 still spends ~0.25 s writing its logs.
Fails: rank 1 held back >= 0.3 s before its dist.recv (rank 1's call 3;
init_process_group=1, barrier=2), or rank 1 slow by >= 0.3 s before every call:
rank 0 is gone and rank 1's recv raises "Connection closed by peer".
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
    req = dist.isend(metrics, dst=1)  # BUG: request kept but never waited on
    time.sleep(0.25)  # stands in for writing rank 0's own logs
else:
    time.sleep(0.05)  # stands in for rank 1's final bookkeeping
    metrics = torch.empty(2)
    dist.recv(metrics, src=0)
    assert torch.allclose(metrics, torch.tensor([0.25, 0.75]))
dist.destroy_process_group()
