"""new_group called under `if rank == 0:` (the common forum report "new_group
hangs when only rank 0 calls it"). After training, rank 0 creates one group
more than the others, to gather a checkpoint shard from the last rank; the
other ranks never call new_group again, finish and exit, and rank 0 waits in
new_group for a rank that is gone.
"""
# world: 3
# kind: group_mismatch
# culprits: 0
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
world = dist.get_world_size()
T = datetime.timedelta(seconds=10)

dp = dist.new_group(list(range(world)), timeout=T)
w = torch.zeros(8)
for step in range(3):
    g = torch.ones(8) * (rank + step)
    dist.all_reduce(g, group=dp)
    w -= 0.1 * g / world

if rank == 0:
    # bug: only rank 0 creates the checkpoint group
    ckpt = dist.new_group([0, world - 1], timeout=T)
    shard = torch.zeros(8)
    dist.broadcast(shard, src=world - 1, group=ckpt)
dist.destroy_process_group()
print("OK")
