"""Multi-task training with stochastic auxiliary regularisers.

Besides the main regression loss, each step may add a consistency loss
(prediction on a noisy copy of the batch) and a weight-decay-like penalty,
each switched on at random. Loss components are averaged across workers for
logging, gradients are averaged by hand.
"""
import datetime
import random

import torch
import torch.distributed as dist
import torch.nn as nn

STEPS = 6
P_CONSISTENCY = 0.5
P_PENALTY = 0.3


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    random.seed(1000 + rank)  # different augmentation stream per worker
    model = nn.Linear(10, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    for step in range(STEPS):
        x = torch.randn(32, 10) + rank
        y = x.sum(dim=1, keepdim=True)
        out = model(x)
        losses = [nn.functional.mse_loss(out, y)]
        if random.random() < P_CONSISTENCY:
            noisy = model(x + 0.1 * torch.randn_like(x))
            losses.append(0.1 * nn.functional.mse_loss(noisy, out.detach()))
        if random.random() < P_PENALTY:
            losses.append(1e-3 * sum(p.pow(2).sum() for p in model.parameters()))

        logged = []
        for term in losses:
            t = term.detach().reshape(1)
            dist.all_reduce(t)
            logged.append(t.item() / world)

        opt.zero_grad()
        sum(losses).backward()
        flat = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
        dist.all_reduce(flat)
        flat /= world
        offset = 0
        for p in model.parameters():
            n = p.numel()
            p.grad.copy_(flat[offset:offset + n].view_as(p))
            offset += n
        opt.step()
        if rank == 0:
            print(f"step {step}: " + " ".join(f"{v:.4f}" for v in logged))

    dist.destroy_process_group()


if __name__ == "__main__":
    main()
