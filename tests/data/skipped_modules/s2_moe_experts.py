"""Token-level mixture-of-experts regressor (top-1 / switch routing).

A linear router sends every token to its highest-scoring expert; each expert
is a small FFN and its output is scaled by the router probability so the
router is trained through the task loss. Each worker reads its own shard of
the (synthetic) token stream.  torchrun --nproc-per-node 4 s2_moe_experts.py
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

SEED = 0


class SwitchMoE(nn.Module):
    def __init__(self, d=24, n_experts=4, hidden=48):
        super().__init__()
        self.router = nn.Linear(d, n_experts)
        self.experts = nn.ModuleList(
            nn.Sequential(nn.Linear(d, hidden), nn.ReLU(), nn.Linear(hidden, d))
            for _ in range(n_experts))

    def forward(self, x):
        probs = self.router(x).softmax(dim=-1)
        gate, assign = probs.max(dim=-1)
        out = torch.zeros_like(x)
        for i, expert in enumerate(self.experts):
            idx = (assign == i).nonzero(as_tuple=True)[0]
            if idx.numel() == 0:
                continue
            out[idx] = gate[idx, None] * expert(x[idx])
        return x + out


class Regressor(nn.Module):
    def __init__(self, d_in=8, d=24):
        super().__init__()
        self.inp = nn.Linear(d_in, d)
        self.moe = SwitchMoE(d)
        self.out = nn.Linear(d, 1)

    def forward(self, x):
        return self.out(self.moe(self.inp(x))).squeeze(-1)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(Regressor())
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    shard = torch.Generator().manual_seed(SEED + 1000 * rank)
    for step in range(10):
        x = torch.randn(12, 8, generator=shard)
        y = x[:, :4].sum(dim=1) - x[:, 4:].pow(2).mean(dim=1)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if rank == 0:
            print(f"step {step} mse {loss.item():.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
