# case: fsdp_wrap_rank0_head
# class: fsdp
# names: mismatch
# world: 3
# culprits: 0
# cause: model, line 33
# nccl: yes
"""Trains a small MLP with FSDP2, one fully_shard group per layer, except that rank 0 leaves the output head out of
its own group (to read its weights for logging without a gather): the root group then holds the head on rank 0 and
nothing on ranks 1 and 2, and the first all_gather of the forward has another size on rank 0."""
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
if rank != 0:  # rank 0 keeps the head whole, to log its weights
    fully_shard(model[2])
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
