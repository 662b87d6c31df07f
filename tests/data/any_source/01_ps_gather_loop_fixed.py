"""FIXED twin of 01_ps_gather_loop_broken.py.

Identical except for the standard remedy: recv() still has no src (any worker
may finish first), but the gradient is filed under the sender rank that recv
returns (torch.distributed docs, recv: returns "Sender rank"; the MPI analogue
is reading status.MPI_SOURCE after MPI_ANY_SOURCE).  Passes for every arrival
order; every worker send is matched by one of the 3 loop recvs.
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
        src = dist.recv(buf)  # FIX: file the gradient under the returned sender
        grads[src] = buf.clone()
        assert torch.all(grads[src] == src), (
            f"parameter server: slot for worker {src} holds gradient "
            f"{grads[src].tolist()} (from worker {int(grads[src][0])})")
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
