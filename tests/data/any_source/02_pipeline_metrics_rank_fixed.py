"""FIXED twin of 02_pipeline_metrics_rank_broken.py.

Identical except for the standard remedy: stage 1 names its peer,
`dist.recv(act, src=0)` (torch.distributed docs, recv: "src (int, optional) -
Source rank ... Will receive from any process if unspecified.").  The metrics
rank's send stays pending until stage 1's `recv(stats, src=2)`, so it is
matched in every arrival order.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 3, "run with --nproc-per-node 3"

if rank == 0:  # stage 0
    x = torch.arange(4, dtype=torch.float32)
    time.sleep(0.1)  # forward of stage 0
    dist.send(x * 2, dst=1)
elif rank == 1:  # stage 1
    act = torch.zeros(4)
    dist.recv(act, src=0)  # FIX: name the previous stage
    out = act * 3
    expected = torch.arange(4, dtype=torch.float32) * 6
    assert torch.equal(out, expected), (
        f"stage 1: input {act.tolist()} is not stage 0's activation")
    stats = torch.zeros(4)
    dist.recv(stats, src=2)
    assert torch.equal(stats, torch.full((4,), -1.0)), f"bad stats {stats}"
else:  # metrics rank
    time.sleep(1.5)  # aggregates loss scale / throughput stats
    dist.send(torch.full((4,), -1.0), dst=1)

dist.destroy_process_group()
