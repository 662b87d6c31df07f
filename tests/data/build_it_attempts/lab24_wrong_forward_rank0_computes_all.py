"""Lab 24 (tensor parallelism), task `my_forward()` (section 1 "Your forward" cell).

WRONG.
Property violated: tensor parallelism (each rank computes its slice). Rank 0 runs the whole unsplit MLP, the
other ranks contribute zeros, and one all_reduce of the output "sums the partial outputs" -- so a rule that
only asks for an all_reduce of the output is satisfied, and the values are right.
Values: right at every N. Only a check that each rank's contribution is its own slice (e.g. the partial sums
differ from zero on every rank, or per-rank work/shapes) catches it.
Source: the lab's exercise 1 shortcut (tp.unsplit_on_every_rank), dressed up to pass the all_reduce rule.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox.course import tensor_parallel as tp


def my_forward():
    rank, world = tp.setup()
    w = tp.weights()
    x, _ = tp.batch()
    if rank == 0:
        y = F.linear(F.gelu(F.linear(x, w["w1"], w["b1"])), w["w2"])
    else:
        y = torch.zeros(x.shape[0], w["w2"].shape[0])
    dist.all_reduce(y)
    y = y + w["b2"]
    return {"y": y.detach()}
