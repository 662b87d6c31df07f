"""Small Transformer-style encoder classifier trained with LayerDrop.

LayerDrop (Fan et al., 2019) randomly drops whole residual blocks during
training, which regularises the encoder and lets us prune layers at
inference time. Each worker seeds its RNG with SEED + rank so that the
synthetic batches and the dropped layers are decorrelated across workers.

    torchrun --nproc-per-node 2 ok1_layerdrop.py
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

SEED = 53


class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.ff = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        return x + self.ff(self.norm(x))


class LayerDropEncoder(nn.Module):
    def __init__(self, d_in=16, d=32, depth=6, n_classes=5, layerdrop=0.2):
        super().__init__()
        self.embed = nn.Linear(d_in, d)
        self.layers = nn.ModuleList(Block(d) for _ in range(depth))
        self.head = nn.Linear(d, n_classes)
        self.layerdrop = layerdrop

    def forward(self, x):
        h = self.embed(x)
        for layer in self.layers:
            out = layer(h)
            if self.training:
                # mask the block instead of skipping it so every parameter stays in the graph
                keep = (torch.rand(()) >= self.layerdrop).float()
                out = keep * out + (1.0 - keep) * h
            h = out
        return self.head(h.mean(dim=1))


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(LayerDropEncoder())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    torch.manual_seed(SEED + rank)
    for step in range(10):
        x = torch.randn(8, 12, 16)
        y = torch.randint(0, 5, (8,))
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
