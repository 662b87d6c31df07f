# case: p2p_cycle_ring
# class: p2p/cycle
# names: p2p_cycle
# world: 3
# culprits: 0, 1, 2
# cause: send, line 26
# nccl: no
"""Ring attention over three ranks: each rank passes its key block to the next rank and takes the previous rank's,
but every rank sends before it receives, so the whole ring waits in send."""
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
    dist.send(block, dst=next_rank)  # every rank of the ring sends first
    dist.recv(incoming, src=prev_rank)
    block = incoming

attention = torch.softmax(torch.cat(scores, dim=1), dim=1)
print(f"rank {rank}: attention {tuple(attention.shape)}")
dist.destroy_process_group()
