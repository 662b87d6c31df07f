"""Lab 23 (sharding), task `my_zero()` (section 2 "Your ZeRO" cell).

WRONG.
Property violated: ZeRO. The gradient is all_reduced in full and Adam steps the WHOLE flat vector on every
rank: every rank keeps Adam's two moments for all 467 parameters and no reduce_scatter is made. This is plain
data parallelism written with a flat vector (the learner "fixed" the 467-vs-468 error by avoiding the
reduce-scatter).
Values: right at every world size dividing the batch (1, 2, 3, 4, 6, 8). Only the rule "gradient by
reduce_scatter, own part only" or a count of optimizer-state bytes (934 numbers instead of ~2x117) catches it.
Source: the obvious way around the padding error; ZeRO paper (Rajbhandari et al. 2020) baseline.
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
    flat = nn.Parameter(parameters_to_vector(params).detach().clone())
    adam = torch.optim.Adam([flat], lr=LR)
    for step in range(STEPS):
        x, y = local(step, rank, world)
        model.zero_grad(set_to_none=True)
        loss_fn(model(x), y).backward()
        grads = torch.cat([p.grad.reshape(-1) for p in params])
        dist.all_reduce(grads)
        flat.grad = grads / world
        adam.step()
        vector_to_parameters(flat.detach(), params)
    return weights(model)
