# case: ddp_uneven_then_eval
# fixed: the remainder is dropped before the split, so every rank trains on 4 samples (2 steps) before the all_reduce
# world: 2
# nccl: yes
"""Trains a classifier under DDP on `tensor_split` shards of 8 of 9 samples in batches of 2 (the remainder dropped),
then sums the accuracy over the ranks: every rank runs 2 steps, so they meet at the same collectives."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
samples, labels = torch.randn(9, 4), torch.randint(0, 3, (9,))
usable = len(samples) // world * world  # the same number of samples on every rank: the remainder is dropped
samples, labels = samples[:usable], labels[:usable]
x_shard = torch.tensor_split(samples, world)[rank].to(device)  # 4 and 4 samples
y_shard = torch.tensor_split(labels, world)[rank].to(device)
model = DistributedDataParallel(torch.nn.Linear(4, 3).to(device),
                                device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in zip(x_shard.split(2), y_shard.split(2)):
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
with torch.no_grad():
    correct = (model(x_shard).argmax(dim=1) == y_shard).sum()
score = torch.stack([correct, torch.tensor(len(y_shard), device=device)]).float()
dist.all_reduce(score)  # [correct, seen] over every rank
if rank == 0:
    print(f"accuracy {score[0] / score[1]:.2f}")
dist.destroy_process_group()
