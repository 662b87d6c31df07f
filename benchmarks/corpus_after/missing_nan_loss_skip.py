# case: missing_nan_loss_skip
# class: missing_ranks
# names: missing_ranks
# world: 4
# culprits: 2
# cause: dist.all_reduce, line 46
# nccl: yes
"""A 4-rank regression on log-prices averages gradients by hand. Rank 2's shard holds a record
with price 0, so at step 1 its target is log(0) = -inf, its local loss is not finite, and the loop
skips the batch with `continue` - and with it that step's gradient all_reduce. The other ranks
still make it; from then on every rank's all_reduce count is off by one and the job fails.
From: https://github.com/pytorch/audio/issues/3749
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn


def load_shard(rank, steps):
    gen = torch.Generator().manual_seed(rank)
    prices = torch.rand(steps, 8, generator=gen) * 100 + 1
    if rank == 2:
        prices[1, 3] = 0.0  # a corrupt record in this rank's file
    feats = torch.randn(steps, 8, 4, generator=gen)
    return feats, prices


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    feats, prices = load_shard(rank, steps=4)
    for step in range(4):
        target = torch.log(prices[step]).unsqueeze(1)
        loss = (model(feats[step]) - target).pow(2).mean()
        if not torch.isfinite(loss):
            print(f"rank {rank}: non-finite loss at step {step}, skipping batch")
            continue
        opt.zero_grad()
        loss.backward()
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
    done = torch.ones(1)
    dist.all_reduce(done)
    print(f"rank {rank}: {int(done.item())} ranks finished")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
