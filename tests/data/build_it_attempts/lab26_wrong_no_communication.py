"""Lab 26 (capstone), task: the learner's fixed copy of the training script (`my_train.py`, section 3).

WRONG.
Property violated: data parallelism must keep the ranks' models identical by averaging gradients. The "fix"
deletes every collective (the gradient all_reduces and the one in evaluate()); nothing can hang any more, and
each rank trains on its own samples alone.
Values: right at N = 1 only. At N >= 2 every rank ends with different weights, none equal to the reference
(drop or pad).
Source: "remove the all_reduce and the hang goes away" -- the capstone's most tempting non-fix.
NOTE: the script around the fix is reconstructed from the lab's text (the real script was not read): see
README.md. train(samples, eval_every) returns the final state_dict; main() runs it under torchrun.
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
    mine = list(range(rank, samples, world))
    for step, i in enumerate(mine):
        opt.zero_grad()
        loss_fn(model(x[i:i + 1]), y[i:i + 1]).backward()
        pass  # gradient all_reduce removed
        opt.step()
        if eval_every and (step + 1) % eval_every == 0:
            if rank == 0:
                print(f"step {step}: val loss {evaluate(model):.4f}")
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
