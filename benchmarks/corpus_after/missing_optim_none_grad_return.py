# case: missing_optim_none_grad_return
# class: missing_ranks
# names: missing_ranks
# world: 2
# culprits: 1
# cause: dist.all_reduce, line 32
# nccl: yes
"""A two-expert model is trained with a hand-written data-parallel SGD whose step() all-reduces
every gradient. Tokens are routed by the sign of their sum and rank 1's shard only holds positive
tokens, so its "neg" expert gets no gradient; step() meets p.grad is None and returns early,
skipping the all_reduce of the remaining parameters, while rank 0 makes those all_reduces.
From: https://github.com/facebookresearch/optimizers/pull/149
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn


class AllReduceSGD(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, {"lr": lr})

    @torch.no_grad()
    def step(self):
        world = dist.get_world_size()
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    return
                dist.all_reduce(p.grad)
                p.sub_(group["lr"] * p.grad / world)


class TwoExperts(nn.Module):
    def __init__(self):
        super().__init__()
        self.head = nn.Linear(4, 1)
        self.pos, self.neg = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x):
        h = torch.zeros_like(x)
        route = x.sum(dim=1) > 0
        if (~route).any():
            h[~route] = self.neg(x[~route])
        if route.any():
            h[route] = self.pos(x[route])
        return self.head(torch.relu(h))


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = TwoExperts()
    opt = AllReduceSGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(rank)
    for step in range(3):
        x = torch.randn(8, 4, generator=gen) + 3.0 * rank  # shards differ in mean
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank}: head weight sum {model.head.weight.sum().item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
