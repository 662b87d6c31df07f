"""Lab 24 (tensor parallelism), task `my_forward()` (section 1 "Your forward" cell).

WRONG.
Property violated: row-parallel second Linear with ONE all_reduce of the partial outputs. The learner splits
w1 by rows (column-parallel) but then all_gathers the hidden features and runs the second Linear with the
FULL w2 on every rank: the second layer is not split at all, the collective moves the 16-wide hidden layer
(not the 8-wide output), and it is an all_gather, not an all_reduce.
Values: right at N = 1, 2, 4, 8 (16 hidden features split evenly). At N = 3 (if tp.shard allows an uneven
split, 6/5/5) dist.all_gather of unequal shapes fails.
Source: Megatron-LM's "gather_output=True" column-parallel layer used where a row-parallel layer belongs; the
lab's exercise 3 describes the cost of gathering the hidden layer.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox.course import tensor_parallel as tp


def my_forward():
    rank, world = tp.setup()
    w, s = tp.weights(), tp.shard(rank, world)
    x, _ = tp.batch()
    hidden = F.gelu(F.linear(x, w["w1"][s], w["b1"][s]))
    parts = [torch.empty_like(hidden) for _ in range(world)]
    dist.all_gather(parts, hidden.contiguous())
    y = F.linear(torch.cat(parts, dim=1), w["w2"], w["b2"])
    return {"y": y.detach()}
