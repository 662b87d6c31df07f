# case: groups_per_rank_lists
# class: groups
# names: groups
# world: 4
# culprits: 0, 1, 2, 3
# cause: new_group, line 24
# nccl: yes
"""Two-way tensor parallelism: ranks 0 and 2, and ranks 1 and 3, are data-parallel replicas. Each rank creates only
its own data-parallel group, but new_group must be called by every rank for every group, with the same ranks:
the two groups get the same name, and their ranks wait for each other."""
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
dp_group = dist.new_group(my_replicas)

torch.manual_seed(rank)
shard = torch.nn.Linear(4, 2).to(device)  # this rank's slice of the layer
shard(torch.randn(8, 4, device=device)).pow(2).mean().backward()
for p in shard.parameters():
    dist.all_reduce(p.grad, group=dp_group)
    p.grad /= len(my_replicas)
print(f"rank {rank}: averaged grads over {my_replicas}: {shard.bias.grad.tolist()}")
dist.destroy_process_group()
