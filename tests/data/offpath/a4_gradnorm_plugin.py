"""Data-parallel training loop with a small plugin mechanism.

Plugins get a hook right before the optimizer step. The GradNormPlugin
measures the global gradient norm (over all ranks) and clips to max_norm.
Ranks alternate between two data augmentation pipelines (even / odd ranks),
and the even-rank pipeline is the one that gets gradient clipping.
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn


class GradNormPlugin:
    def __init__(self, max_norm=1.0):
        self.max_norm = max_norm

    def before_optimizer_step(self, model):
        sq = torch.stack([p.grad.pow(2).sum() for p in model.parameters()]).sum()
        dist.all_reduce(sq)
        total = sq.sqrt().item()
        scale = min(1.0, self.max_norm / (total + 1e-6))
        for p in model.parameters():
            p.grad.mul_(scale)


def sync_gradients(model):
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= dist.get_world_size()


def build_pipeline(rank):
    plugins = []
    noise = 0.1 if rank % 2 == 0 else 0.0
    if rank % 2 == 0:
        plugins.append(GradNormPlugin(max_norm=0.5))
    return noise, plugins


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 20), nn.Tanh(), nn.Linear(20, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    noise, plugins = build_pipeline(rank)
    torch.manual_seed(rank)
    for step in range(8):
        x = torch.randn(32, 10)
        y = (x.sum(1) > 0).long()
        x = x + noise * torch.randn_like(x)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        sync_gradients(model)
        for plugin in plugins:
            plugin.before_optimizer_step(model)
        opt.step()
    if rank == 0:
        print(f"final loss {loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
