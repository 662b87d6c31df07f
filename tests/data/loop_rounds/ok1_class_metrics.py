"""Distributed evaluation of a small classifier.

Each worker scores its own shard of the validation set and we log the
per-class accuracy over all workers, plus the overall accuracy.
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

    # (correct, count) per metric; every class key exists on every rank,
    # a class absent from this shard just contributes zeros.
    metrics = {"acc/overall": ((pred == y).sum().item(), y.numel())}
    for c in range(NUM_CLASSES):
        mask = y == c
        metrics[f"acc/class{c}"] = ((pred[mask] == c).sum().item(), mask.sum().item())

    averaged = {}
    for name, (correct, count) in sorted(metrics.items()):
        t = torch.tensor([float(correct), float(count)])
        dist.all_reduce(t, op=dist.ReduceOp.SUM)
        averaged[name] = (t[0] / t[1]).item() if t[1] > 0 else float("nan")

    if rank == 0:
        for name, value in averaged.items():
            print(f"{name:>14s}: {value:.3f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
