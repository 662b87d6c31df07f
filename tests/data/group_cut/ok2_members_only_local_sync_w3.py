"""Correct "new_group called only by members": the documented way to let
non-members skip the call is use_local_synchronization=True (group name is a
hash of the member list, not a per-process counter). Ranks 0 and 1 create their
pair group this way; rank 2, a monitor that is in no group and never calls
new_group, joins a world barrier and leaves; the pair keeps working after it.
"""
# world: 3
# kind: none
# culprits: none
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
T = datetime.timedelta(seconds=10)

pair = None
if rank in (0, 1):
    pair = dist.new_group([0, 1], timeout=T, use_local_synchronization=True)
dist.barrier()

if rank == 2:  # monitor: nothing else to do
    dist.destroy_process_group()
    print("OK")
    raise SystemExit(0)

for step in range(3):
    x = torch.full((4,), float(rank + step))
    dist.all_reduce(x, group=pair)
    assert x[0].item() == float(1 + 2 * step), x
dist.destroy_process_group()
print("OK")
