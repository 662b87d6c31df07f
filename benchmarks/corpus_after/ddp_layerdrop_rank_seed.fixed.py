# case: ddp_layerdrop_rank_seed
# fixed: DDP is built with find_unused_parameters=True, so blocks a rank skipped are marked ready with zero gradient
# world: 3
# nccl: yes
"""A residual MLP trained with DDP uses LayerDrop: in training each block is skipped when torch.rand() < p, and the
global RNG is seeded with seed + rank, so ranks skip different blocks. DDP is told that some parameters may go
unused (find_unused_parameters=True), so each rank marks its skipped blocks ready and every rank still joins every
gradient all-reduce.
From: https://github.com/catalyst-team/catalyst/issues/1110
"""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

SEED = 10


class LayerDropMLP(torch.nn.Module):
    def __init__(self, width=32, depth=4, p=0.2):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(width, width) for _ in range(depth))
        self.p = p

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(1).item() < self.p:
                continue  # LayerDrop: skip this block
            x = x + torch.relu(block(x))
        return x


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DDP(LayerDropMLP(), find_unused_parameters=True)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    torch.manual_seed(SEED + rank)  # different augmentation per rank
    data = torch.Generator().manual_seed(100 + rank)
    for step in range(3):
        x = torch.randn(16, 32, generator=data)
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"rank {rank}: step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
