"""Not a group problem: the collective inside a subgroup has a different shape
on one rank (reports of all_reduce hanging or failing when the last rank gets
the leftover samples of an uneven split). new_subgroups is called by all ranks;
subgroup [0, 1] finishes and exits, in subgroup [2, 3] rank 3 reduces two
elements more than rank 2 (gloo lets rank 2 finish that step with a wrong
result; the pair then gets stuck).
"""
# world: 4
# kind: collective_mismatch
# culprits: 3
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
world = dist.get_world_size()
T = datetime.timedelta(seconds=10)

sub, _ = dist.new_subgroups(group_size=2, timeout=T)
n_samples = 10
per_rank = n_samples // world
mine = per_rank + (n_samples % world if rank == world - 1 else 0)  # bug: leftovers
for epoch in range(3):
    losses = torch.ones(mine) * (rank + epoch)
    dist.all_reduce(losses, group=sub)  # per-sample losses of the pair
dist.destroy_process_group()
print("OK")
