# case: groups_nonmember_wrong_group
# fixed: each rank picks its own pair group with rank // 2, so every all_reduce runs on a group the rank belongs to
# world: 4
# nccl: yes
"""nonmember_wrong_group.fixed -- correct twin of nonmember_wrong_group.py.

Report: https://github.com/pytorch/pytorch/pull/67639
Fix (minimal): each rank picks its own pair group with rank // 2, so every all_reduce runs on a group the rank belongs to.
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
"""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"

# every rank must create every group, members or not
groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
my_group = groups[rank // 2]  # FIX: the pair of rank r is r // 2

t = torch.tensor([float(rank + 1)])
dist.all_reduce(t, group=my_group)  # pair sum

expected = {0: 3.0, 1: 3.0, 2: 7.0, 3: 7.0}[rank]
if t.item() != expected:
    print(f"WRONG rank {rank}: pair sum {t.item()} expected {expected}", flush=True)
else:
    print(f"OK rank {rank}: pair sum {t.item()}", flush=True)

dist.destroy_process_group()
