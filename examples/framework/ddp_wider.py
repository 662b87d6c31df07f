"""DDP over a model built from a per-rank config: rank 1 reads a wider hidden size.
Run: python -m sandbox.run -n 4 examples/framework/ddp_wider.py"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
hidden = 16 if rank == 1 else 8  # BUG: rank 1 read another config
model = DDP(torch.nn.Sequential(torch.nn.Linear(8, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 1)))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
