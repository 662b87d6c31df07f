"""Sharded optimizer step (ZeRO-1 style) for a small MLP.

Every parameter has one owner rank, derived from its name. Gradients are
averaged on all ranks, only the owner keeps optimizer state for a parameter
and applies the update, then broadcasts the new values to everyone else.
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn


def owner_of(name, world):
    return hash(name) % world


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(12, 24), nn.GELU(), nn.Linear(24, 24),
                          nn.GELU(), nn.Linear(24, 3))
    owners = {name: owner_of(name, world) for name, _ in model.named_parameters()}
    mine = [p for name, p in model.named_parameters() if owners[name] == rank]
    opt = torch.optim.Adam(mine, lr=1e-3) if mine else None
    torch.manual_seed(rank)
    for step in range(5):
        x = torch.randn(16, 12)
        loss = nn.functional.cross_entropy(model(x), x[:, :3].argmax(1))
        model.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        if opt is not None:
            opt.step()
        with torch.no_grad():
            for name, p in model.named_parameters():
                dist.broadcast(p.data, src=owners[name])
        if rank == 0:
            print(f"step {step} loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
