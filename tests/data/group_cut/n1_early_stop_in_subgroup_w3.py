"""Not a group problem: local early stopping (the classic "training hangs when
one rank stops early / breaks out of the loop" report). Groups are created by
every rank in the same order. Rank 1 decides on its own loss to stop and
finishes, rank 0 waits for it in the next all_reduce of their pair group. Rank
2 (in no group) leaves after a barrier, which is safe.
"""
# world: 3
# kind: missing_ranks
# culprits: 1
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
T = datetime.timedelta(seconds=10)

pair = dist.new_group([0, 1], timeout=T)
spare = dist.new_group([1, 2], timeout=T)
dist.barrier()
if rank == 2:
    dist.destroy_process_group()
    print("OK")
    raise SystemExit(0)

loss = 1.0
for step in range(5):
    local = torch.tensor([loss * (1.0 + 0.5 * rank)])
    if rank == 1 and local.item() < 0.5:
        break  # bug: early stop decided from the local loss only
    dist.all_reduce(local, group=pair)
    loss *= 0.6
dist.destroy_process_group()
print("OK")
