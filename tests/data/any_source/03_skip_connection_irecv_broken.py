"""Last pipeline stage posts irecv() WITHOUT src for "the previous stage" while
the first stage also sends it a skip-connection tensor.

Pattern: a 4-stage pipeline with a U-Net style skip connection from stage 0 to
stage 3 (cf. torchgpipe docs, "Skip Connections", where skip tensors travel
between non-adjacent partitions).  Stage 3 overlaps communication by posting
both receives up front; the one for the main path was left without src.
torch.distributed docs, irecv: "src (int, optional) - Source rank on global
process group (regardless of group argument). Will receive from any process if
unspecified."

World size 4.  The main path 0 -> 1 -> 2 -> 3 takes ~0.15 s; stage 0 sends the
skip tensor after a further 1.0 s of side-branch work, so in a quiet run the
any-source irecv gets stage 2's output and the program passes.  If stage 0's
skip tensor is matched by that irecv, stage 3 fails its check.  Note: gloo
gives the already-posted irecv(src=0) priority over the earlier any-source
irecv for a message arriving after both are posted, so the wrong match needs
the skip send to be pending at rank 3 before the irecvs are posted (stage 3
starts late and stage 2 is slow).
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
    w_prev = dist.irecv(h)  # BUG: no src; assumes stage 2's output
    w_skip = dist.irecv(skip, src=0)
    w_prev.wait()
    assert torch.equal(h, x + 3), (
        f"stage 3: main-path input is {h[0].item()} (from rank "
        f"{w_prev._source_rank()}), expected stage 2's {x[0].item() + 3}")
    w_skip.wait()
    assert torch.equal(skip, torch.full((8,), 100.0)), f"bad skip {skip}"
    print("stage 3 output", (h + skip).sum().item())

dist.destroy_process_group()
