"""Lab 23 (sharding), task `my_zero()` (section 2 "Your ZeRO" cell).

WRONG.
Property violated: padding must be to a multiple of the CURRENT world size, ceil(467/N)*N. The learner read
the lab's answer ("pad ... up to a multiple of N (468 here)") and pads to 468 always.
Values: right where N divides 468: N = 1, 2, 3, 4, 6 (and 9, 12, 13, ...). At N = 5, 7, 8
reduce_scatter_single refuses (468 is not N equal parts: 8 x 58 = 464, 8 x 59 = 472): an error on every rank.
A check run only at 3 and 4 ranks accepts it; the lab's own exercise 2 runs 3 ranks, where 468 is right.
Source: hard-coding the lab's numbers (the text gives 468 for both 4 and 3 ranks).
"""
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.utils import parameters_to_vector, vector_to_parameters

from sandbox import compat
from sandbox.course.sharding import LR, STEPS, local, loss_fn, make_model, weights


PADDED = 468  # 467 parameters, padded to a multiple of the world size


def my_zero():
    rank, world = dist.get_rank(), dist.get_world_size()
    model = make_model()
    params = list(model.parameters())
    n = sum(p.numel() for p in params)
    flat = torch.zeros(PADDED)
    flat[:n] = parameters_to_vector(params).detach()
    shard = nn.Parameter(flat.tensor_split(world)[rank].clone())
    adam = torch.optim.Adam([shard], lr=LR)
    for step in range(STEPS):
        x, y = local(step, rank, world)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads = torch.zeros(PADDED)
        grads[:n] = torch.cat([p.grad.reshape(-1) for p in params])
        mine = torch.empty_like(shard)
        compat.reduce_scatter_single(mine, grads)
        shard.grad = mine / world
        adam.step()
        compat.all_gather_single(flat, shard.detach())
        vector_to_parameters(flat[:n], params)
    return weights(model)
