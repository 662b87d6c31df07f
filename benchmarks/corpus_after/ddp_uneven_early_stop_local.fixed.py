# case: ddp_uneven_early_stop_local
# fixed: average the validation loss over all ranks (all_reduce) before the early-stopping test
# world: 4
# nccl: yes
"""Four DDP ranks fit y = 2x with early stopping (patience 2). Each rank computes a validation
loss on its own shard - rank 3's shard comes from a source whose labels have the opposite sign -
and the losses are averaged over all ranks before the early-stopping test, so every rank takes
the same decision and they leave the epoch loop together.
From: https://github.com/Lightning-AI/pytorch-lightning/issues/379
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

PATIENCE = 2


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp_model = DDP(nn.Linear(1, 1))
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.05)
    gen = torch.Generator().manual_seed(rank)
    sign = -1.0 if rank == 3 else 1.0  # rank 3's validation source is mislabelled
    val_x = torch.randn(32, 1, generator=gen)
    val_y = sign * 2 * val_x
    best, bad_epochs = float("inf"), 0
    for epoch in range(6):
        for step in range(3):
            x = torch.randn(16, 1, generator=gen)
            loss = (ddp_model(x) - 2 * x).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        with torch.no_grad():
            val_loss = (ddp_model.module(val_x) - val_y).pow(2).mean().reshape(1)
        dist.all_reduce(val_loss)
        val_loss = val_loss.item() / dist.get_world_size()
        if val_loss < best:
            best, bad_epochs = val_loss, 0
        else:
            bad_epochs += 1
        print(f"rank {rank} epoch {epoch}: val {val_loss:.4f} bad_epochs {bad_epochs}")
        if bad_epochs >= PATIENCE:
            break
    dist.barrier()
    print(f"rank {rank}: stopped after epoch {epoch}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
