"""Pipeline stage receives "from the previous stage" with recv() WITHOUT src,
while a metrics/logging rank also sends to it.

Pattern: stage 1 was written when stage 0 was its only peer, so it calls
`dist.recv(act)`; later a metrics rank (rank 2) that pushes a loss-scale /
stats tensor of the same shape to every stage was added.  torch.distributed
docs, recv: "src (int, optional) - Source rank on global process group
(regardless of group argument). Will receive from any process if unspecified."
The same hazard is why torch.distributed.pipelining's P2P ops always name the
peer stage explicitly.

World size 3: rank 0 = stage 0, rank 1 = stage 1, rank 2 = metrics rank.
Stage 0 sends its activation after 0.1 s; the metrics rank sends after 1.5 s,
so in a quiet run stage 1 gets the activation first and passes.  If the
metrics tensor is matched first, stage 1 computes on the metrics and fails.
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
    dist.recv(act)  # BUG: no src; assumes the activation from stage 0
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
