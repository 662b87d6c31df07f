"""Lab 24 (tensor parallelism), task `my_forward()` (section 1 "Your forward" cell).

CORRECT for the forward-only task (the lab's own answer says so: "Adding it on rank 0 only, before the
all_reduce, gives the right y too"). Rank 0 folds b2 into its partial sum, the others do not; one all_reduce
of the 4 x 8 output. (In my_mlp the same trick would starve the other ranks' b2 of its gradient: see
lab24_wrong_mlp_b2_on_rank0.py.) Works on any N for which tp.shard splits the hidden features.
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
    y = F.linear(hidden, w["w2"][:, s], w["b2"] if rank == 0 else None)
    dist.all_reduce(y)
    return {"y": y.detach()}
