"""FIXED twin of 03_skip_connection_irecv_broken.py.

Identical except for the standard remedy: the main-path irecv names stage 2,
`dist.irecv(h, src=2)` (torch.distributed docs, irecv: "src ... Will receive
from any process if unspecified.").  Stage 0's skip tensor can then only match
`irecv(skip, src=0)`, in either arrival order.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 4, "run with --nproc-per-node 4"

x = torch.ones(8)
if rank == 0:
    time.sleep(0.05)
    dist.send(x + 1, dst=1)  # main path
    time.sleep(1.0)  # side branch that produces the skip features
    dist.send(torch.full((8,), 100.0), dst=3)  # skip connection
elif rank in (1, 2):
    h = torch.zeros(8)
    dist.recv(h, src=rank - 1)
    time.sleep(0.05)
    dist.send(h + 1, dst=rank + 1)
else:
    h = torch.zeros(8)
    skip = torch.zeros(8)
    w_prev = dist.irecv(h, src=2)  # FIX: name the previous stage
    w_skip = dist.irecv(skip, src=0)
    w_prev.wait()
    assert torch.equal(h, x + 3), (
        f"stage 3: main-path input is {h[0].item()} (from rank "
        f"{w_prev._source_rank()}), expected stage 2's {x[0].item() + 3}")
    w_skip.wait()
    assert torch.equal(skip, torch.full((8,), 100.0)), f"bad skip {skip}"
    print("stage 3 output", (h + skip).sum().item())

dist.destroy_process_group()
