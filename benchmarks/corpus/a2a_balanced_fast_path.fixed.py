# case: a2a_balanced_fast_path
# fixed: the fast path is taken only when what the rank receives is even too
# world: 3
# nccl: yes
"""Hash-routed MoE dispatch: a rank whose tokens split evenly over the experts, both ways, takes a fast path, an
all_to_all_single with no split sizes; the others pass the sizes."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
embedding = torch.nn.Embedding(16, 8).to(device)
batches = [[3, 6, 9, 1, 4, 2], [7, 10, 5, 8, 12, 15], [12, 4, 7, 10, 5, 8]]
token_ids = torch.tensor(batches[rank], device=device)
with torch.no_grad():
    hidden = embedding(token_ids)
expert = token_ids % world  # hash routing: the expert of a token is on rank id % world
order = expert.argsort(stable=True)
send_counts = torch.bincount(expert, minlength=world)
recv_counts = torch.empty_like(send_counts)
dist.all_to_all_single(recv_counts, send_counts)

balanced = bool((send_counts == send_counts[0]).all() and (recv_counts == send_counts[0]).all())
if balanced:  # even split: no split sizes needed
    received = torch.empty_like(hidden)
    dist.all_to_all_single(received, hidden[order])
else:
    received = torch.empty(int(recv_counts.sum()), 8, device=device)
    dist.all_to_all_single(received, hidden[order], recv_counts.tolist(), send_counts.tolist())
print(f"rank {rank}: expert input {tuple(received.shape)}")
dist.destroy_process_group()
