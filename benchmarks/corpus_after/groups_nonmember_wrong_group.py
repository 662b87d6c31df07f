# case: groups_nonmember_wrong_group
# class: groups
# names: groups
# world: 4
# culprits: 1,2
# cause: dist.all_reduce, line 40
# nccl: yes
"""nonmember_wrong_group -- a rank runs all_reduce on a group it is not a member of.

Report: https://github.com/pytorch/pytorch/pull/67639 ("Raise warning when calling
collectives on non-member group objects", closes pytorch/pytorch#67600; also see
https://github.com/pytorch/pytorch/issues/25390 for the "one new_group call per
group on every rank" pattern). Re-authored, not copied.

Mistake: every rank creates the pair groups [0,1] and [2,3] (correctly, all ranks
call new_group for every group) but then picks "its" group with rank % 2 instead of
rank // 2. Ranks 1 and 2 get the other pair's group, i.e. the NON_GROUP_MEMBER
value new_group returns to non-members; all_reduce on it only warns and returns
without communicating.

What torchrun shows: UserWarning "Running all_reduce on global rank 1 which does
not belong to the given group." (and rank 2), ranks 1/2 print WRONG and exit 0, ranks
0/3 fail fast with gloo "Connection closed by peer" (no 10 s timeout); exit != 0.
Culprits: ranks 1 and 2 (line with groups[rank % 2]).
"""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"

# every rank must create every group, members or not
groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
my_group = groups[rank % 2]  # BUG: the pair of rank r is r // 2

t = torch.tensor([float(rank + 1)])
dist.all_reduce(t, group=my_group)  # pair sum

expected = {0: 3.0, 1: 3.0, 2: 7.0, 3: 7.0}[rank]
if t.item() != expected:
    print(f"WRONG rank {rank}: pair sum {t.item()} expected {expected}", flush=True)
else:
    print(f"OK rank {rank}: pair sum {t.item()}", flush=True)

dist.destroy_process_group()
