"""Lab 23 (sharding), task `MyGathered` (section 3 "FSDP" cell; run by `my_fsdp()` = `sh.fsdp(MyGathered)`).

WRONG.
Property violated: the layer's gradient must go back by a reduce_scatter, so that each rank keeps (and
receives) the gradient of its own part only. Here backward regathers correctly but all_reduces the full padded
gradient and slices out its part: the full gradient exists on every rank and twice the bytes move.
Values: right at every world size dividing the batch (1, 2, 3, 4, 6, 8).
Source: same shortcut as in ZeRO (all_reduce then slice), common when reduce_scatter is unfamiliar.
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
        ctx.layer = layer
        return x @ w.T + b

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        w, _ = layer.gather()
        grad = layer.padded(torch.cat([(gy.T @ x).reshape(-1), gy.sum(0)]))
        dist.all_reduce(grad)
        k, r = layer.shard.numel(), dist.get_rank()
        return gy @ w, grad[r * k:(r + 1) * k] / dist.get_world_size(), None


def my_fsdp():
    return sh.fsdp(MyGathered)
