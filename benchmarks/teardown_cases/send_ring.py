# Four ranks pass a large tensor around a ring, each sending to the next before receiving from
# the previous: every send waits for a recv that comes after a send, so the ring never moves.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank, world = dist.get_rank(), dist.get_world_size()
nxt, prev = (rank + 1) % world, (rank - 1) % world
block = torch.full((4 * 1024 * 1024,), float(rank))
incoming = torch.empty_like(block)
print(f"[rank {rank}] passing block to rank {nxt}", flush=True)
dist.send(block, dst=nxt)  # BUG: blocking send before the recv, on every rank
dist.recv(incoming, src=prev)
print(f"[rank {rank}] got block {incoming[0].item()} from rank {prev}", flush=True)
dist.destroy_process_group()
