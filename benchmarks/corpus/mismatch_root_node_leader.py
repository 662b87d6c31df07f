# case: mismatch_root_node_leader
# class: mismatch/root
# names: mismatch
# world: 3
# culprits: 2
# cause: broadcast, line 28
# nccl: yes
"""The starting weights are meant to come from rank 0, but the code broadcasts from the first rank of each node, so
on the second node rank 2 is a root of its own while ranks 0 and 1 receive from rank 0: the broadcast hangs."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

RANKS_PER_NODE = 2
local_rank = rank % RANKS_PER_NODE
node_leader = rank - local_rank  # rank 0 on the first node, rank 2 on the second

torch.manual_seed(rank)  # every rank initialises differently...
model = torch.nn.Linear(4, 2).to(device)
with torch.no_grad():
    for p in model.parameters():
        # ...so copy the weights of one rank to all the others
        dist.broadcast(p, src=node_leader)
print(f"rank {rank}: first weight {model.weight[0, 0].item():.4f}")
dist.destroy_process_group()
