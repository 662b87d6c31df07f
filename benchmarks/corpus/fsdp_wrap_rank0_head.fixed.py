# case: fsdp_wrap_rank0_head
# fixed: every rank, rank 0 included, gives the head its own fully_shard group
# world: 3
# nccl: yes
"""Trains a small MLP with FSDP2, one fully_shard group per layer on every rank, so every rank makes the same
parameter groups and its all_gathers and reduce_scatters match."""
import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
if torch.cuda.is_available():
    torch.cuda.set_device(device)  # FSDP2 builds its mesh on the current device

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).to(device)
fully_shard(model[0])
fully_shard(model[2])  # the same groups on every rank
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x = torch.randn(4, 8, device=device)
    y = torch.randint(0, 4, (4,), device=device)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
