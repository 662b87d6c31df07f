# case: p2p_unmatched_wrong_peer
# fixed: the last stage receives from the stage before it (src=1)
# world: 3
# nccl: yes
"""Inference over a three-stage pipeline: each stage receives the hidden states from the stage before it and the last
stage shares the next tokens."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(rank)
block = torch.nn.Linear(32, 32).to(device)  # this stage's share of the model
hidden = torch.empty(4, 32, device=device)
next_tokens = torch.zeros(4, dtype=torch.long, device=device)

with torch.no_grad():
    if rank == 0:
        prompt = torch.randn(4, 32, device=device)
        dist.send(block(prompt), dst=1)
    elif rank == 1:
        dist.recv(hidden, src=0)
        dist.send(block(hidden), dst=2)
    else:
        dist.recv(hidden, src=1)
        next_tokens = block(hidden).argmax(dim=-1)

dist.broadcast(next_tokens, src=world - 1)
print(f"rank {rank}: next tokens {next_tokens.tolist()}")
dist.destroy_process_group()
