# case: groups_broadcast_group_src_global
# class: groups
# names: groups
# world: 4
# culprits: 1,3
# cause: dist.broadcast, line 42
# nccl: yes
"""broadcast_group_src_global -- broadcast(group_src=<GLOBAL rank>): the opposite mistake.

Report: https://github.com/vllm-project/vllm-omni/pull/6264 (review thread on
group_coordinator.broadcast_tensor_dict: "broadcast_object expects a group-local src,
while torch.distributed.broadcast expects a global src. For subgroup [1, 3], local
src=0 maps to global rank 1; passing that mapped 1 back ... incorrectly selects
global rank 3."). The reverse direction of
https://github.com/meta-pytorch/torchrec/pull/4601. (vllm-omni URL taken from the
issue index; I have not opened it live.)

Mistake: DP groups [0,2] and [1,3]. Each group's leader (its lowest GLOBAL rank,
from get_process_group_ranks) broadcasts its weights, but the code passes that
global rank as `group_src`, which torch reads as a rank INSIDE the group. For [0,2]
leader 0 -> group rank 0 (right by luck); for [1,3] leader 1 -> group rank 1 ==
global rank 3, so rank 3's weights overwrite rank 1's.

What torchrun shows: no error, no warning; rank 1 and rank 3 print WRONG
(both hold rank 3's weights instead of rank 1's); exit 0.
Culprits: ranks 1 and 3 (the broadcast line; 0/2 run it too but it is harmless there).
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
dist.broadcast(weights, group_src=leader, group=dp_group)  # BUG: group_src wants a group rank

expected = torch.full((3,), float(100 + leader))
if not torch.equal(weights, expected):
    print(f"WRONG rank {rank}: weights {weights.tolist()} expected leader {leader}'s {expected.tolist()}", flush=True)
else:
    print(f"OK rank {rank}: weights from leader {leader}", flush=True)

dist.destroy_process_group()
