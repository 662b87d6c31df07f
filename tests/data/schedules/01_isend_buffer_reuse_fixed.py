"""Correct twin of 01_isend_buffer_reuse_broken.py (2 ranks).

Rank 0 waits for the isend to complete before touching the buffer again, so the
receiver sees the step's value whenever rank 1 posts its recv (any delay of
either rank only changes when the transfer happens, not what is transferred).
"""

import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
STEPS = 3
dist.barrier()
if rank == 0:
    buf = torch.zeros(4)
    for step in range(STEPS):
        time.sleep(0.15)  # stands in for the forward pass of this step
        buf.fill_(float(step))
        req = dist.isend(buf, dst=1)
        req.wait()  # FIX: the buffer belongs to the send until wait() returns
        buf.add_(1)
else:
    for step in range(STEPS):
        got = torch.empty(4)
        dist.recv(got, src=0)
        assert torch.all(got == step), f"step {step}: received {got.tolist()}"
dist.barrier()
dist.destroy_process_group()
