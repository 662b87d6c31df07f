# case: a2a_moe_local_splits
# fixed: the ranks exchange their send counts with an all_to_all_single first and receive what the others send
# world: 2
# nccl: yes
"""MoE token dispatch with one expert per rank: each rank sends its tokens to their experts' ranks, after the ranks
exchange their send counts to learn what each will receive."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
router = torch.nn.Linear(32, world).to(device)  # the same router on every rank
torch.manual_seed(1 + rank)
hidden = torch.randn(16, 32, device=device)  # this rank's 16 tokens
with torch.no_grad():
    expert = router(hidden).argmax(dim=1)  # the rank of each token's expert
order = expert.argsort()
send_counts = torch.bincount(expert, minlength=world)

input_splits = send_counts.tolist()
recv_counts = torch.empty_like(send_counts)
dist.all_to_all_single(recv_counts, send_counts)
output_splits = recv_counts.tolist()
received = torch.empty(sum(output_splits), 32, device=device)
dist.all_to_all_single(received, hidden[order], output_splits, input_splits)
print(f"rank {rank}: expert input {tuple(received.shape)}")
dist.destroy_process_group()
