# case: fsdp_uneven_batches
# fixed: a DistributedSampler splits the samples, padding the split so every rank gets 7 samples (3 batches)
# world: 2
# nccl: yes
"""Trains a regressor with FSDP2 on 13 samples in batches of 3, split by a DistributedSampler, which pads the split
so every rank gets 7 samples (3 batches) and makes the same collectives."""
import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader, DistributedSampler

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
if torch.cuda.is_available():
    torch.cuda.set_device(device)  # FSDP2 builds its mesh on the current device

torch.manual_seed(0)
samples = torch.randn(13, 4)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1)).to(device)
fully_shard(model[0])
fully_shard(model[2])
fully_shard(model)
opt = torch.optim.Adam(model.parameters(), lr=0.01)
loader = DataLoader(samples, batch_size=3, sampler=DistributedSampler(samples, shuffle=False))  # the same count
for batch in loader:
    batch = batch.to(device)
    target = batch.sum(dim=1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(batch), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
