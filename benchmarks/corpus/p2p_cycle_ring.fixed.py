# case: p2p_cycle_ring
# fixed: post the send to the next rank as an isend, receive from the previous one, then wait on the send
# world: 3
# nccl: no
"""Ring attention over three ranks: each rank passes its key block to the next rank and takes the previous rank's,
posting the send without blocking so that every receive gets posted too."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

next_rank, prev_rank = (rank + 1) % world, (rank - 1) % world
query = torch.randn(8, 32, device=device)
block = torch.randn(8, 32, device=device)  # the keys this rank holds now
scores = []
for step in range(world):
    scores.append(query @ block.T)
    incoming = torch.empty_like(block)
    sending = dist.isend(block, dst=next_rank)
    dist.recv(incoming, src=prev_rank)
    sending.wait()
    block = incoming

attention = torch.softmax(torch.cat(scores, dim=1), dim=1)
print(f"rank {rank}: attention {tuple(attention.shape)}")
dist.destroy_process_group()
