# case: mismatch_root_node_leader
# fixed: broadcast from global rank 0, the same root on every rank
# world: 3
# nccl: yes
"""The starting weights come from rank 0: every rank broadcasts with src=0, whatever node it is on."""
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
        dist.broadcast(p, src=0)
print(f"rank {rank}: first weight {model.weight[0, 0].item():.4f}")
dist.destroy_process_group()
