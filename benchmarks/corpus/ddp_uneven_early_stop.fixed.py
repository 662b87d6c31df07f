# case: ddp_uneven_early_stop
# fixed: the stopping test uses the loss averaged over every rank (one all_reduce), so every rank stops on the same step
# world: 3
# nccl: yes
"""Trains under DDP until the loss drops below a target, on contiguous shards of a dataset sorted by size: the
ranks average their losses before the test, so they all stop (or go on) together."""
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
    mean_loss = loss.detach().clone()
    dist.all_reduce(mean_loss)  # every rank tests the same number: the loss over the whole batch
    if mean_loss.item() / world < TARGET_LOSS:
        print(f"rank {rank}: target reached at step {step}")
        break
dist.destroy_process_group()
