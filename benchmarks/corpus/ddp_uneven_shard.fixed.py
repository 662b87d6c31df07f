# case: ddp_uneven_shard
# fixed: every rank takes the same number of samples (the remainder is dropped, as DistributedSampler(drop_last=True))
# world: 2
# nccl: yes
"""Trains a small regressor under DDP on contiguous shards of 9 samples in batches of 2: every rank takes 4
samples (2 batches), so every backward's gradient all_reduce has a partner on every rank."""
import datetime
import math

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
samples = torch.randn(9, 4)
per_rank = math.floor(len(samples) / world)
shard = samples[rank * per_rank:(rank + 1) * per_rank]  # the same count on every rank: the remainder is dropped
model = DistributedDataParallel(torch.nn.Linear(4, 1).to(device),
                                device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for batch in shard.split(2):
    batch = batch.to(device)
    loss = (model(batch) - batch.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
print(f"rank {rank}: trained on {len(shard)} samples")
dist.destroy_process_group()
