"""Lab 22 (data parallelism), task `my_naive()` (section 1 cell).

WRONG.
Property violated: the gradient must be the AVERAGE over ranks (sum / world size). This sums it, with zeros
for unused parameters (so it does not hang or mismatch); the step is N times too long.
Values: right only at N=1; wrong at every N >= 2 (all ranks agree with one another, so nothing fails).
Source: the lab's own exercise 1, and the common "forgot to divide by world_size" bug (with Adam it hides).
"""
import torch
import torch.distributed as dist
from sandbox.course.data_parallel import LR, STEPS, local, loss_fn, make_model, weights


def my_naive():
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for step in range(STEPS):
        x, y, hard = local(step, rank, world)
        opt.zero_grad()
        loss_fn(model(x, hard), y).backward()
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        opt.step()
    return weights(model)
