# case: groups_per_rank_lists
# fixed: every rank creates both data-parallel groups, in the same order, and keeps its own
# world: 4
# nccl: yes
"""Two-way tensor parallelism: ranks 0 and 2, and ranks 1 and 3, are data-parallel replicas. Every rank creates
both data-parallel groups, in the same order, as new_group requires, and keeps the one it belongs to."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

TP = 2
tp_rank = rank % TP
# the data-parallel replicas of this rank's tensor-parallel shard: [0, 2] or [1, 3]
my_replicas = [r for r in range(world) if r % TP == tp_rank]
groups = [dist.new_group([r for r in range(world) if r % TP == t]) for t in range(TP)]  # every group, every rank
dp_group = groups[tp_rank]

torch.manual_seed(rank)
shard = torch.nn.Linear(4, 2).to(device)  # this rank's slice of the layer
shard(torch.randn(8, 4, device=device)).pow(2).mean().backward()
for p in shard.parameters():
    dist.all_reduce(p.grad, group=dp_group)
    p.grad /= len(my_replicas)
print(f"rank {rank}: averaged grads over {my_replicas}: {shard.bias.grad.tolist()}")
dist.destroy_process_group()
