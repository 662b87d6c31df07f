"""Lab 22 (data parallelism), task `my_naive()` (section 1 cell).

CORRECT (alternative).
Divides the LOSS by the world size before backward (so each rank's gradient is already 1/N of its slice's),
then sums the gradients with one all_reduce per parameter, in model.parameters() order on every rank, with
zeros for a parameter this rank did not use. Sum of (g_r / N) = the average; the division moves before the
communication (what DDP's gradient pre-divide / `gradient_predivide_factor` does).
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
        (loss_fn(model(x, hard), y) / world).backward()
        for p in model.parameters():
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            dist.all_reduce(p.grad)
        opt.step()
    return weights(model)
