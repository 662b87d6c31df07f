"""Lab 22 (data parallelism), task `my_naive()` (section 1 cell).

WRONG.
Property violated: works for any world size. The divisor is hard-coded to the lab's 4 ranks
(`p.grad /= 4`, "24 samples in 4 slices of 6").
Values: right at N=4 only; wrong at N=2, 3, 6, 8 (step N/4 times the right length; at N=1 four times too
short).
Source: hard-coding the example's world size.
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
            p.grad /= 4
        opt.step()
    return weights(model)
