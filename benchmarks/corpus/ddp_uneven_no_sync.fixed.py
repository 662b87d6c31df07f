# case: ddp_uneven_no_sync
# fixed: the ranks agree on the number of micro-batches (all_reduce MIN) first: they leave no_sync() together
# world: 2
# nccl: yes
"""Accumulates gradients over 2 micro-batches per step under DDP's no_sync(), after dropping outliers: the ranks
agree on the smallest number of micro-batches first, so each leaves no_sync() on the same micro-steps."""
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
micro_batches = samples.split(2)
count = torch.tensor([len(micro_batches)], device=device)
dist.all_reduce(count, op=dist.ReduceOp.MIN)  # as many micro-batches as the smallest shard has, on every rank
for i, micro in enumerate(micro_batches[:count.item()]):
    sync = (i + 1) % ACCUM == 0
    with contextlib.nullcontext() if sync else model.no_sync():
        loss = (model(micro) - micro.sum(dim=1, keepdim=True)).pow(2).mean() / ACCUM
        loss.backward()  # outside no_sync(): all_reduces the accumulated gradients
    if sync:
        opt.step()
        opt.zero_grad()
dist.destroy_process_group()
