"""Parameter server gathers worker gradients with recv() WITHOUT src, in a loop.

Pattern: a rank-0 parameter server loops `for i in 1..W: dist.recv(buf)` and
stores the i-th arrival as "worker i's gradient" -- it assumes arrival order
equals rank order.  torch.distributed docs, recv: "src (int, optional) - Source
rank on global process group (regardless of group argument). Will receive from
any process if unspecified." and it returns "Sender rank", which this loop
ignores.  Same pitfall as MPI_ANY_SOURCE in manager/worker code that ignores
status.MPI_SOURCE (MPI standard, "Message Selection"; Gropp/Lusk/Skjellum,
"Using MPI", manager/worker matrix-vector example).

World size 4.  Workers finish after 0.4/0.8/1.2 s, so in a quiet run they
arrive in rank order and the program passes.  If worker 3 (or 2) arrives first,
rank 0 files its gradient under the wrong worker and the assert fails.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
assert world == 4, "run with --nproc-per-node 4"

if rank == 0:
    grads = {}
    for i in range(1, world):
        buf = torch.zeros(4)
        dist.recv(buf)  # BUG: no src; assumes the i-th arrival is worker i
        grads[i] = buf.clone()
        assert torch.all(grads[i] == i), (
            f"parameter server: slot for worker {i} holds gradient "
            f"{grads[i].tolist()} (from worker {int(grads[i][0])})")
    new_param = sum(grads.values()) / (world - 1)
    for i in range(1, world):
        dist.send(new_param, dst=i)
else:
    time.sleep(0.4 * rank)  # simulated backward pass; worker 1 is fastest
    dist.send(torch.full((4,), float(rank)), dst=0)
    param = torch.zeros(4)
    dist.recv(param, src=0)
    assert torch.allclose(param, torch.full((4,), 2.0)), f"bad param {param}"

dist.destroy_process_group()
