"""isend whose buffer is modified before wait() (2 ranks).

Rank 0 streams per-step activations to rank 1 with dist.isend and, to save memory,
refills the same buffer for the next step before calling wait(). Writing to a
tensor after isend() is undefined until wait() returns
(https://github.com/pytorch/tutorials/issues/3009); the MPI analogue is
https://github.com/xiaoyeli/superlu_dist/pull/117 ("prevent the send buffer from
being overwritten until it has been sent out"). With gloo the bytes leave rank 0
only once rank 1's matching recv is posted.

Passes: the usual schedule. Rank 1 is already waiting in recv when rank 0 calls
isend (rank 0 spends ~0.15 s per step first), so the data is copied out at once.
Fails: rank 1 held back >= 0.2 s before any of its dist.recv calls (rank 1's calls
3, 4, 5; init_process_group=1, barrier=2), or rank 1 slow by >= 0.2 s before every
call: rank 0 has already done buf.add_(1), rank 1 receives the next step's value
and its assert fires. Delays of rank 0 never fail.
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
        buf.add_(1)  # BUG: buffer reused (pre-filled for next step) before wait()
        req.wait()
else:
    for step in range(STEPS):
        got = torch.empty(4)
        dist.recv(got, src=0)
        assert torch.all(got == step), f"step {step}: received {got.tolist()}"
dist.barrier()
dist.destroy_process_group()
