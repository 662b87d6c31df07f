"""Two threads issue collectives on the same process group (2 ranks).

A gradient thread and a statistics thread both call dist.all_reduce on the
default group. Collectives are matched across ranks by issue order, which each
rank's thread scheduling decides:
https://github.com/KempnerInstitute/KempnerForge/issues/104 ("Concurrent
collectives on the same process group from two threads have no cross-rank
ordering guarantee"); gloo's advice is one context per thread
(https://github.com/pytorch/gloo/issues/35).

Passes: the usual schedule. The gradient thread issues at once, the statistics
thread first computes for ~0.15 s, so both ranks issue gradients first.
Fails: rank 0 or rank 1 held back >= 0.2 s before its gradient all_reduce (its
call 3; init_process_group=1, barrier=2): that rank issues statistics first, the
sums are cross-paired (1 + 20 instead of 1 + 2) and the asserts fire. A uniformly
slow rank does not fail: it shifts both threads' calls alike.
"""

import datetime
import threading
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
out = {}


def sync_grads():
    g = torch.full((4,), float(rank + 1))
    dist.all_reduce(g)  # BUG: same group as the other thread
    out["grads"] = g


def sync_stats():
    time.sleep(0.15)  # stands in for computing the statistics
    s = torch.full((4,), 10.0 * (rank + 1))
    dist.all_reduce(s)  # BUG: same group as the other thread
    out["stats"] = s


dist.barrier()
threads = [threading.Thread(target=sync_grads), threading.Thread(target=sync_stats)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert torch.all(out["grads"] == 3.0), f"grads {out['grads'].tolist()}"
assert torch.all(out["stats"] == 30.0), f"stats {out['stats'].tolist()}"
dist.barrier()
dist.destroy_process_group()
