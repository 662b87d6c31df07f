"""Collective issued only if a thread's result is already there (2 ranks).

Each rank evaluates an old checkpoint on a background thread and all_reduces the
metric once it is in the queue. "Is it ready?" is answered per rank by thread
scheduling, so one rank can enter the extra collective while the other skips it:
https://github.com/NVIDIA-NeMo/Automodel/pull/3824 ("rank-local worker scheduling
can cause some ranks to skip the ... broadcast while other ranks enter it").

Passes: the usual schedule. The evaluation takes 0.375 s; ranks look at the queue
in lockstep at ~0.15/0.30/0.45 s (while the gradient all_reduce is in flight) and
both find the result at step 3.
Fails: one rank held back so that its look lands after 0.375 s while the other's
is before: >= 0.1 s before its 2nd gradient all_reduce (call 4; init_process_group
=1, barrier=2, all_reduces=3..) or >= 0.25 s before its 1st (call 3), either rank;
or a rank slow by >= 0.25 s before every call (0.1 s is not enough). Its 1-element
metric all_reduce meets the other rank's 4-element gradient all_reduce; gloo
errors out or times out (10 s).
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
w, metric = torch.zeros(4), None
for step in range(6):
    time.sleep(0.15)  # stands in for forward/backward
    work = dist.all_reduce(g := torch.ones(4), async_op=True)
    try:
        m = results.get_nowait()  # BUG: readiness is rank-local and timing-dependent
    except queue.Empty:
        m = None
    work.wait()
    w -= 0.1 * g
    if m is not None:
        dist.all_reduce(m)  # mean eval metric over ranks
        metric = m.item() / 2
assert metric == 1.5 and torch.allclose(w, torch.full((4,), -1.2)), (metric, w)
dist.destroy_process_group()
