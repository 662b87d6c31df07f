"""Data-parallel MLP training with activation monitoring.

Gradients are flattened into one buffer and averaged with a single all_reduce
per step. On the main process a forward hook on the hidden layer collects the
activation norm of every rank so that dead or exploding units show up early.
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn


def gather_activation_norms(module, inputs, output):
    norm = output.detach().norm().reshape(1)
    norms = [torch.zeros(1) for _ in range(dist.get_world_size())]
    dist.all_gather(norms, norm)
    module.last_norms = [n.item() for n in norms]


def average_gradients(model):
    grads = [p.grad for p in model.parameters()]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= dist.get_world_size()
    offset = 0
    for g in grads:
        g.copy_(flat[offset:offset + g.numel()].view_as(g))
        offset += g.numel()


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    is_main_process = rank == 0
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    if is_main_process:
        model[1].register_forward_hook(gather_activation_norms)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    torch.manual_seed(100 + rank)
    for step in range(10):
        x = torch.randn(16, 8)
        y = x[:, :1] * 2.0
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        average_gradients(model)
        opt.step()
        if is_main_process and step % 5 == 0:
            print(f"step {step} loss {loss.item():.4f} act norms {model[1].last_norms}")
    dist.destroy_process_group()


if __name__ == "__main__":
    nn.Linear(1, 1)(torch.ones(1)).sum().backward()  # warm-up: a first backward loads autograd's kernels
    main()
