# case: groups_gather_object_dst_local
# fixed: translate the group-local coordinator to a global rank for dst (dist.get_global_rank(dp_group, coordinator_rank))
# world: 4
# nccl: yes
"""gather_object_dst_local.fixed -- correct twin of gather_object_dst_local.py.

Report: https://github.com/pytorch/pytorch/pull/136854
Fix (minimal): translate the group-local coordinator to a global rank for dst (dist.get_global_rank(dp_group, coordinator_rank)).
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
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
dist.gather_object(local_plan, gathered, dst=dist.get_global_rank(dp_group, coordinator_rank), group=dp_group)  # FIX

if is_coordinator:
    members = dist.get_process_group_ranks(dp_group)
    expected = [{"rank": r, "items": [f"shard{r}"]} for r in members]
    if gathered != expected:
        print(f"WRONG rank {rank}: gathered {gathered} expected {expected}", flush=True)
    else:
        print(f"OK rank {rank}: gathered plans of {members}", flush=True)

dist.destroy_process_group()
