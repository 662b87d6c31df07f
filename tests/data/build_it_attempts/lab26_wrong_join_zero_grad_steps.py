"""Lab 26 (capstone), task: the learner's fixed copy of the training script (`my_train.py`, section 3).

WRONG (by the lab's own acceptance rule).
Property violated: the weights must match a single-process reference of the same training with the tail
dropped or padded. This fixes the uneven steps the way DDP's Join context manager does: a rank that has run
out of samples keeps "shadowing" the others' gradient all_reduces with zero gradients (and skips the optimizer
step), so every rank makes the same number of calls; evaluate() is called by every rank. The last step then
averages rank 0's 13th sample with three zeros (divided by the initial world size, Join's default): a valid
technique for uneven inputs, but the final weights match neither reference.
Values: right where N divides --samples (e.g. 13 samples: N = 1, 13; 12 or 16 samples: N = 2, 4); wrong at
13 samples on N = 2, 3, 4, 8.
Source: torch.distributed.algorithms.join.Join / DDP.join (lab 11); the lab's text accepts only drop or pad.
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
        loss = loss_fn(model(vx), vy).reshape(1)
    dist.all_reduce(loss)
    return loss.item() / dist.get_world_size()


def train(samples, eval_every):
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = dataset(samples)
    mine = list(range(rank, samples, world))
    steps = -(-samples // world)  # the most steps any rank makes
    for step in range(steps):
        opt.zero_grad()
        if step < len(mine):
            i = mine[step]
            loss_fn(model(x[i:i + 1]), y[i:i + 1]).backward()
        else:  # joined: shadow the others' all_reduces with zeros, as DDP's Join does
            for p in model.parameters():
                p.grad = torch.zeros_like(p)
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        if eval_every and (step + 1) % eval_every == 0:
            val = evaluate(model)  # every rank: evaluate() makes a collective
            if rank == 0:
                print(f"step {step}: val loss {val:.4f}")
    dist.barrier()
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
