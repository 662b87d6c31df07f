# case: ddp_uneven_no_sync
# class: ddp/uneven
# names: uneven_steps
# world: 2
# culprits: 0
# cause: backward, line 33
# nccl: yes
"""Accumulates gradients over 2 micro-batches per step under DDP's no_sync(), after dropping outliers: rank 0 keeps
9 samples (5 micro-batches), rank 1 keeps 6 (3), so rank 0 leaves no_sync() a second time and its gradient
all_reduce has no partner."""
import contextlib
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
samples = torch.randn(20, 4)[rank::world]
samples = samples[samples.norm(dim=1) < 2.5].to(device)  # drop outliers: how many survive differs by rank
model = DistributedDataParallel(torch.nn.Linear(4, 1).to(device),
                                device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
ACCUM = 2  # micro-batches per optimizer step
for i, micro in enumerate(samples.split(2)):
    sync = (i + 1) % ACCUM == 0
    with contextlib.nullcontext() if sync else model.no_sync():
        loss = (model(micro) - micro.sum(dim=1, keepdim=True)).pow(2).mean() / ACCUM
        loss.backward()  # outside no_sync(): all_reduces the accumulated gradients
    if sync:
        opt.step()
        opt.zero_grad()
dist.destroy_process_group()
