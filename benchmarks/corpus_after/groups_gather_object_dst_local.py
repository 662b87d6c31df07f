# case: groups_gather_object_dst_local
# class: groups
# names: groups
# world: 4
# culprits: 1,3
# cause: dist.gather_object, line 40
# nccl: yes
"""gather_object_dst_local -- gather_object(dst=<group-local coordinator>, group=dp_group).

Report: https://github.com/pytorch/pytorch/pull/136854 ("[DCP] use global coordinator
rank for distributed ops in _DistWrapper": dcp.save/load break when a process_group
is given and its local rank 0 is not global rank 0); also
https://github.com/pytorch/pytorch/issues/141825 and
https://github.com/pytorch/pytorch/pull/147675 (same _DistWrapper.gather_object).

Mistake: a DCP-like wrapper picks coordinator_rank = 0 as a rank *within* the DP
group and passes it as gather_object's `dst`, which torch interprets as a GLOBAL
rank. DP groups are [0,2] and [1,3]; for [1,3] global rank 0 is not a member.

What torchrun shows: ranks 1 and 3 raise
"ValueError: Global rank 0 is not part of group <...ProcessGroup...>"; ranks 0/2
finish (local 0 == global 0 there); exit != 0.
Culprits: ranks 1 and 3 (the gather_object line).
"""
import datetime

import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"

dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
dp_group = dp_groups[rank % 2]
coordinator_rank = 0  # rank inside dp_group, like DCP's _DistWrapper
is_coordinator = dist.get_rank(dp_group) == coordinator_rank

local_plan = {"rank": rank, "items": [f"shard{rank}"]}
gathered = [None] * dist.get_world_size(dp_group) if is_coordinator else None
dist.gather_object(local_plan, gathered, dst=coordinator_rank, group=dp_group)  # BUG: dst is global

if is_coordinator:
    members = dist.get_process_group_ranks(dp_group)
    expected = [{"rank": r, "items": [f"shard{r}"]} for r in members]
    if gathered != expected:
        print(f"WRONG rank {rank}: gathered {gathered} expected {expected}", flush=True)
    else:
        print(f"OK rank {rank}: gathered plans of {members}", flush=True)

dist.destroy_process_group()
