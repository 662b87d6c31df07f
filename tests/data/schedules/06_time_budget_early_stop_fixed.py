"""Correct twin of 06_time_budget_early_stop_broken.py (2 ranks).

The clock check is turned into a collective decision: every step the ranks
all_reduce(MAX) their "out of time" flags, so all ranks leave the loop at the same
step whatever delays they see (the fix used in
https://github.com/ultralytics/yolov5/pull/8345 and Lightning's early stopping).
"""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
BUDGET = 0.55  # seconds of training we can afford
dist.barrier()
t0 = time.time()
w, step = torch.zeros(4), 0
while True:
    time.sleep(0.1)  # stands in for forward/backward
    g = torch.full((4,), float(rank + 1))
    work = dist.all_reduce(g, async_op=True)
    stop = torch.tensor([int(time.time() - t0 > BUDGET)])
    work.wait()
    w -= 0.1 * g
    step += 1
    dist.all_reduce(stop, op=dist.ReduceOp.MAX)  # FIX: one decision for all ranks
    if stop.item():
        break
n = torch.tensor([step])
dist.all_reduce(n, op=dist.ReduceOp.MAX)
assert n.item() == step, f"rank {rank}: {step} steps, another rank {n.item()}"
dist.destroy_process_group()
