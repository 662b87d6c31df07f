# Two ranks each send a large tensor to the other before receiving: a send/send cycle.
# 4M floats (16 MiB) is far more than gloo can buffer, so both sends block forever.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
peer = 1 - rank
mine = torch.full((4 * 1024 * 1024,), float(rank))
theirs = torch.empty_like(mine)
print(f"[rank {rank}] exchanging activations with rank {peer}", flush=True)
dist.send(mine, dst=peer)  # BUG: both ranks send first
dist.recv(theirs, src=peer)
print(f"[rank {rank}] got {theirs[0].item()}", flush=True)
dist.destroy_process_group()
