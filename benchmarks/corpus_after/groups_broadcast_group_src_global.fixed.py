# case: groups_broadcast_group_src_global
# fixed: the leader is a global rank, so pass it as src= (global), not group_src=
# world: 4
# nccl: yes
"""broadcast_group_src_global.fixed -- correct twin of broadcast_group_src_global.py.

Report: https://github.com/vllm-project/vllm-omni/pull/6264
Fix (minimal): the leader is a global rank, so pass it as src= (global), not group_src=.
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
"""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"

dp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
dp_group = dp_groups[rank % 2]
leader = min(dist.get_process_group_ranks(dp_group))  # a GLOBAL rank

weights = torch.full((3,), float(100 + rank))
dist.broadcast(weights, src=leader, group=dp_group)  # FIX: leader is a global rank

expected = torch.full((3,), float(100 + leader))
if not torch.equal(weights, expected):
    print(f"WRONG rank {rank}: weights {weights.tolist()} expected leader {leader}'s {expected.tolist()}", flush=True)
else:
    print(f"OK rank {rank}: weights from leader {leader}", flush=True)

dist.destroy_process_group()
