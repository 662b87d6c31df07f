"""Distributed evaluation of a small classifier.

Each worker scores its own shard of the validation set and we log the
per-class accuracy averaged over workers, plus the overall accuracy.
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn

NUM_CLASSES = 5
CLASS_PRIOR = torch.tensor([0.40, 0.30, 0.20, 0.09, 0.01])  # class 4 is rare


def load_val_shard(rank, n=48):
    g = torch.Generator().manual_seed(100 + rank)
    y = torch.multinomial(CLASS_PRIOR, n, replacement=True, generator=g)
    x = torch.randn(n, 16, generator=g) + y.unsqueeze(1).float() * 0.5
    return x, y


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, NUM_CLASSES))
    model.eval()

    x, y = load_val_shard(rank)
    with torch.no_grad():
        pred = model(x).argmax(dim=1)

    metrics = {"acc/overall": (pred == y).float().mean().item()}
    for c in range(NUM_CLASSES):
        mask = y == c
        if mask.any():
            metrics[f"acc/class{c}"] = (pred[mask] == c).float().mean().item()

    averaged = {}
    for name, value in sorted(metrics.items()):
        t = torch.tensor([value])
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        averaged[name] = t.item() / world

    if rank == 0:
        for name, value in averaged.items():
            print(f"{name:>14s}: {value:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
