"""Lab 26 (capstone), task: the learner's fixed copy of the training script (`my_train.py`, section 3).

WRONG.
Property violated: data parallelism (each rank processes its share). The "fix" makes every rank process the
WHOLE global batch of each step (samples k*N .. k*N+N-1, the tail dropped) and removes all collectives; the
ranks agree because they do identical work. No hang, no communication, N times the compute.
Values: right (equal to the drop-the-tail reference) at every N, for every --samples / --eval-every. Only a
check that the ranks communicate (gradient all_reduces) or split the data catches it.
Source: the "every rank sees the full dataset" mistake (no sampler).
NOTE: the script around the fix is reconstructed from the lab's text: see README.md.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch import nn

# ---- the parts of the script that no fix touches (reconstructed from the lab's text; see README) ----
LR = 0.1


def make_model():
    torch.manual_seed(0)
    return nn.Linear(4, 1)


def dataset(samples):
    g = torch.Generator().manual_seed(1)
    x = torch.randn(samples, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.1 * torch.randn(samples, 1, generator=g)
    return x, y


def val_set():
    g = torch.Generator().manual_seed(2)
    x = torch.randn(8, 4, generator=g)
    return x, x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])


def loss_fn(out, y):
    return ((out - y) ** 2).mean()


def evaluate(model):
    with torch.no_grad():
        vx, vy = val_set()
        return loss_fn(model(vx), vy).item()


def train(samples, eval_every):
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = dataset(samples)
    steps = samples // world
    for step in range(steps):  # every rank: the whole global batch of this step, no communication
        opt.zero_grad()
        batch = slice(step * world, (step + 1) * world)
        loss_fn(model(x[batch]), y[batch]).backward()
        opt.step()
        if eval_every and (step + 1) % eval_every == 0:
            if rank == 0:
                print(f"step {step}: val loss {evaluate(model):.4f}")
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=13)
    ap.add_argument("--eval-every", type=int, default=2)
    a = ap.parse_args()
    dist.init_process_group("gloo")
    w = train(a.samples, a.eval_every)
    if dist.get_rank() == 0:
        print({k: v.tolist() for k, v in w.items()})
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
