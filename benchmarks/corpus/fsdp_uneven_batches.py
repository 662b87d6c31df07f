# case: fsdp_uneven_batches
# class: fsdp
# names: uneven_steps
# world: 2
# culprits: 0
# cause: model, line 34
# nccl: yes
"""Trains a regressor with FSDP2 on a strided split of 13 samples in batches of 3: rank 0 gets 7 samples (3 batches),
rank 1 gets 6 (2 batches), so rank 0's third forward all_gathers parameters with a rank that has stopped training."""
import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.utils.data import DataLoader

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
loader = DataLoader(samples[rank::world], batch_size=3)  # every world-th sample: 7 on rank 0, 6 on rank 1
for batch in loader:
    batch = batch.to(device)
    target = batch.sum(dim=1, keepdim=True)
    loss = torch.nn.functional.mse_loss(model(batch), target)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
