"""Lab 23 (sharding), task `MyGathered` (section 3 "FSDP" cell; run by `my_fsdp()` = `sh.fsdp(MyGathered)`).

WRONG.
Property violated: "each layer's full parameters must be gathered again for its backward, never kept from its
forward". The learner removed `w` from save_for_backward (as the lab asks) but stashed it on the ctx as a
plain attribute, `ctx.w = w`, so the full weight still lives from forward to backward, and no all_gather
happens in backward (one gather per layer per step instead of two).
Values: right at every world size dividing the batch (1, 2, 3, 4, 6, 8). A check that only looks at
ctx.saved_tensors would miss it; counting all_gathers (2 per layer per step) catches it.
Source: stashing tensors on ctx instead of save_for_backward is a known autograd anti-pattern (torch docs,
"Extending torch.autograd": use save_for_backward for tensors).
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox import compat
from sandbox.course import sharding as sh


class MyGathered(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, shard, layer):
        w, b = layer.gather()
        ctx.save_for_backward(x)
        ctx.w = w  # "not saved", but kept alive all the same
        ctx.layer = layer
        return x @ w.T + b

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        w, layer = ctx.w, ctx.layer
        grad = torch.cat([(gy.T @ x).reshape(-1), gy.sum(0)])
        mine = torch.empty_like(layer.shard)
        compat.reduce_scatter_single(mine, layer.padded(grad))
        return gy @ w, mine / dist.get_world_size(), None


def my_fsdp():
    return sh.fsdp(MyGathered)
