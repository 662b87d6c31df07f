"""DDP with uneven inputs: rank 3's shard holds one more batch, so it runs one more step than its peers.
Its extra backward makes a gradient all_reduce (in DDP's C++ reducer) that no other rank makes.
Run: python -m sandbox.run -n 4 examples/framework/ddp_uneven.py"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
batches = [torch.randn(4, 8) for _ in range(3 + (rank == 3))]  # BUG: rank 3 has one batch more
for x in batches:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
