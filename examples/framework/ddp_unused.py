"""DDP where forward uses a layer on rank 0 only: on ranks 1-3 that layer's parameters get no gradient, so DDP's
reducer never finishes their bucket, while rank 0 all_reduces it.
Run: python -m sandbox.run -n 4 examples/framework/ddp_unused.py"""
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body = torch.nn.Linear(8, 8)
        self.extra = torch.nn.Linear(8, 8)
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x):
        x = self.body(x)
        if dist.get_rank() == 0:  # BUG: only rank 0 uses self.extra
            x = self.extra(x)
        return self.head(x)


dist.init_process_group("gloo")
torch.manual_seed(0)
model = DDP(Net())
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    loss = model(torch.randn(4, 8)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
