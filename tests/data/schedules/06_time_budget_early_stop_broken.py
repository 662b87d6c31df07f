"""Per-rank wall-clock budget decides when to stop (2 ranks).

Each rank trains until its own clock says the budget is used up, checking it while
the gradient all_reduce is in flight. Ranks can stop at different steps and the
leftover collectives mismatch: https://github.com/pytorch/pytorch/issues/22834
("You have timing code in there. It is possible that one process exits before the
other one, causing the hang.") and the per-rank early stopping of
https://github.com/Lightning-AI/pytorch-lightning/issues/379.

Passes: the usual schedule. Both ranks check at ~0.1 s * step after the barrier,
>= 0.04 s from the 0.55 s budget edge, and both stop after step 6.
Fails: one rank held back before one of its gradient all_reduces so its check
lands past 0.55 s while the other's does not: >= 0.1 s before the 5th (call 7;
init_process_group=1, barrier=2, all_reduces=3..), >= 0.3 s before the 3rd
(call 5), 0.5 s before any of calls 3..7, on either rank; or a rank slow by 0.1 s
or 0.3 s before every call (0.15 s happens to keep them together). That rank
stops a step early, its final all_reduce meets the other's gradient all_reduce and
the step-count assert fires (or gloo reports a size mismatch / closed peer).
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
    out_of_time = time.time() - t0 > BUDGET  # BUG: each rank decides on its own clock
    work.wait()
    w -= 0.1 * g
    step += 1
    if out_of_time:
        break
n = torch.tensor([step])
dist.all_reduce(n, op=dist.ReduceOp.MAX)
assert n.item() == step, f"rank {rank}: {step} steps, another rank {n.item()}"
dist.destroy_process_group()
