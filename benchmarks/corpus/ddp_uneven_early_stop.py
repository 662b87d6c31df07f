# case: ddp_uneven_early_stop
# class: ddp/uneven
# names: uneven_steps
# world: 3
# culprits: 2
# cause: backward, line 32
# nccl: yes
"""Trains under DDP until the loss drops below a target, on contiguous shards of a dataset sorted by size: each
rank tests its own batch's loss, rank 2 (the smallest samples) stops after two steps, and ranks 0 and 1 go on to a
backward whose gradient all_reduce rank 2 never joins."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
samples = torch.randn(48, 4)
samples = samples[samples.norm(dim=1).argsort(descending=True)]  # sorted by size, as the files were
shard = samples[rank * 16:(rank + 1) * 16].to(device)
model = DistributedDataParallel(torch.nn.Linear(4, 1).to(device),
                                device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.05)
TARGET_LOSS = 1.0
for step, batch in enumerate(shard.split(4)):
    loss = (model(batch) - batch.sum(dim=1, keepdim=True)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if loss.item() < TARGET_LOSS:  # this rank's own loss: each rank decides alone
        print(f"rank {rank}: target reached at step {step}")
        break
dist.destroy_process_group()
