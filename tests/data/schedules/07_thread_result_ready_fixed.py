"""Correct twin of 07_thread_result_ready_broken.py (2 ranks).

The ranks agree on readiness: each step they all_reduce(MIN) a "my result is
ready" flag and only take the result out of the queue and all_reduce it when every
rank has one, so all ranks enter the metric collective at the same step whatever
delays they see.
"""

import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
results = queue.Queue()


def evaluate():  # background evaluation of the previous checkpoint
    time.sleep(0.375)
    results.put(torch.tensor([float(rank + 1)]))


dist.barrier()
threading.Thread(target=evaluate, daemon=True).start()
w, metric, done = torch.zeros(4), None, False
for step in range(6):
    time.sleep(0.15)  # stands in for forward/backward
    work = dist.all_reduce(g := torch.ones(4), async_op=True)
    ready = torch.tensor([int(not done and not results.empty())])
    work.wait()
    w -= 0.1 * g
    dist.all_reduce(ready, op=dist.ReduceOp.MIN)  # FIX: ready only if ready everywhere
    if ready.item():
        m = results.get()
        dist.all_reduce(m)  # mean eval metric over ranks
        metric, done = m.item() / 2, True
if not done:  # finish the evaluation together after the loop
    m = results.get()
    dist.all_reduce(m)
    metric = m.item() / 2
assert metric == 1.5 and torch.allclose(w, torch.full((4,), -1.2)), (metric, w)
dist.destroy_process_group()
