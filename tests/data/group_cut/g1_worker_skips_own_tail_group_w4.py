"""new_group inside a rank-dependent branch (the shape of the many PyTorch forum
"dist.new_group() hangs" threads): a loop creates the groups, but a special case
for the last worker skips the one group that it is a member of. A logger rank
that belongs to no group calls every new_group correctly (as a non-member) and
then leaves early, so it looks like the rank that "went away".
"""
# world: 4
# kind: group_mismatch
# culprits: 2
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
T = datetime.timedelta(seconds=10)
LOGGER, LAST_WORKER = 3, 2

groups = {}
for name, members in [("workers", [0, 1, 2]), ("tail", [1, 2])]:
    if name == "tail" and rank == LAST_WORKER:
        continue  # bug: "the last worker owns the tail shard, it needs no tail group"
    groups[name] = dist.new_group(members, timeout=T)

if rank == LOGGER:  # nothing to reduce: write the log header and go
    time.sleep(1)
    dist.destroy_process_group()
    print("OK")
    raise SystemExit(0)

grad = torch.ones(8) * (rank + 1)
dist.all_reduce(grad, group=groups["workers"])
if rank in (1, 2) and "tail" in groups:
    dist.all_reduce(grad, group=groups["tail"])
dist.destroy_process_group()
print("OK")
