"""Lab 23 (sharding), task `my_zero()` (section 2 "Your ZeRO" cell).

WRONG.
Property violated: "Adam on each rank must step only that rank's part; Adam's moments exist for that part
only". Communication is right (padded reduce_scatter of the own part, then all_gather), but Adam is built over
a FULL-length padded vector whose gradient is zero outside this rank's part. Adam leaves zero-gradient
entries unchanged (m = v = 0, update 0), so the numbers are right, yet every rank holds exp_avg and
exp_avg_sq for all 468 entries: no memory saved.
Values: right at every world size dividing the batch (1, 2, 3, 4, 6, 8). Only the SCATTERS rule is
satisfied; a check of optimizer-state size (or of what Adam steps) catches it.
Source: ZeRO-1's whole point is the optimizer state (ZeRO paper, section 5); "keep one optimizer, mask the
gradient" is a natural first attempt.
"""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from sandbox import compat
from sandbox.course.sharding import LR, STEPS, local, loss_fn, make_model, weights


def my_zero():
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    part = -(-n // world)
    full = nn.Parameter(torch.zeros(part * world))
    with torch.no_grad():
        full[:n] = parameters_to_vector(params).detach()
    adam = torch.optim.Adam([full], lr=LR)
    mine_slice = slice(rank * part, (rank + 1) * part)
    for step in range(STEPS):
        x, y = local(step, rank, world)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads = torch.zeros(part * world)
        grads[:n] = torch.cat([p.grad.reshape(-1) for p in params])
        mine = torch.empty(part)
        compat.reduce_scatter_single(mine, grads)
        g = torch.zeros(part * world)
        g[mine_slice] = mine / world
        full.grad = g
        adam.step()
        flat = torch.empty(part * world)
        compat.all_gather_single(flat, full.detach()[mine_slice].clone())
        vector_to_parameters(flat[:n], params)
    return weights(model)
