"""Lab 24 (tensor parallelism), task `my_forward()` (section 1 "Your forward" cell).

WRONG.
Property violated: rank r keeps one N-th of the hidden features (`tp.shard(rank, world)`). The learner
hard-codes the 2-rank split from the table, `slice(8 * rank, 8 * rank + 8)`.
Values: right at N = 2, and ALSO right at N = 3, 4, 8: ranks 0 and 1 cover all 16 features, ranks >= 2 get
empty slices and contribute zeros to the all_reduce. Wrong only at N = 1 (half the features). So the values
never reveal it at N >= 2: only a check of each rank's shard (shapes of its slices/gradients, or that every
rank does 1/N of the work) catches it.
Source: hard-coding the lab's 2-rank table.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox.course import tensor_parallel as tp


def my_forward():
    rank, world = tp.setup()
    w = tp.weights()
    s = slice(8 * rank, 8 * rank + 8)  # rows 0-7 or 8-15, as in the table
    x, _ = tp.batch()
    hidden = F.gelu(F.linear(x, w["w1"][s], w["b1"][s]))
    y = F.linear(hidden, w["w2"][:, s])
    dist.all_reduce(y)
    y = y + w["b2"]
    return {"y": y.detach()}
