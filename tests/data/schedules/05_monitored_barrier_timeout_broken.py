"""monitored_barrier with a timeout too short for a slow rank (2 ranks).

After each epoch the ranks meet in dist.monitored_barrier(timeout=0.3 s), set low
so that a hung rank is reported quickly: the trade-off discussed when the API was
added (https://github.com/pytorch/pytorch/pull/53773) and the spurious blame of
https://github.com/pytorch/pytorch/issues/83289.

Passes: ranks even. Both do the same ~0.1 s of work after the all_reduce and
reach the barrier within a few ms of each other.
Fails: rank 1 held back >= 0.35 s before either monitored_barrier (rank 1's calls
4 and 6; init_process_group=1, barrier=2, all_reduce=3 and 5), or rank 1 slow by
>= 0.3 s before every call: rank 0 raises "Rank 1 failed to pass monitoredBarrier
in 300 ms". Delaying rank 0 does not fail (the others wait for its ack with the
10 s group timeout).
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
    # BUG: 0.3 s is less than the delay a healthy but slow rank can have
    dist.monitored_barrier(timeout=datetime.timedelta(seconds=0.3))
assert torch.allclose(w, torch.full((4,), 1.0 - 0.1 * 3 * 2))
dist.destroy_process_group()
