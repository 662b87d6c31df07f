"""Correct twin of 08_threads_collective_order_broken.py (2 ranks).

Each thread gets its own process group, created in the same order on every rank
from the main thread, so each group sees exactly one stream of collectives and the
order in which the two threads reach their groups no longer matters.
"""

import datetime
import threading
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
out = {}
grads_pg, stats_pg = dist.new_group(), dist.new_group()  # FIX: one group per thread


def sync_grads():
    g = torch.full((4,), float(rank + 1))
    dist.all_reduce(g, group=grads_pg)
    out["grads"] = g


def sync_stats():
    time.sleep(0.15)  # stands in for computing the statistics
    s = torch.full((4,), 10.0 * (rank + 1))
    dist.all_reduce(s, group=stats_pg)
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
