"""Lab 23 (sharding), task `MyGathered` (section 3 "FSDP" cell; run by `my_fsdp()` = `sh.fsdp(MyGathered)`).

CORRECT (alternative).
Forward gathers, computes with F.linear and saves only x (the gathered tensors die when forward returns).
Backward gathers the layer again and lets autograd compute the local gradients (a small
torch.enable_grad() graph over F.linear and torch.autograd.grad) instead of writing gy.T @ x by hand, then
pre-divides by N and reduce_scatters the padded flat gradient so each rank receives its own part.
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
        return F.linear(x, w, b)

    @staticmethod
    def backward(ctx, gy):
        (x,) = ctx.saved_tensors
        layer = ctx.layer
        w, b = layer.gather()
        with torch.enable_grad():
            xx = x.detach().requires_grad_()
            ww = w.detach().requires_grad_()
            bb = b.detach().requires_grad_()
            gx, gw, gb = torch.autograd.grad(F.linear(xx, ww, bb), (xx, ww, bb), gy)
        flat = layer.padded(torch.cat([gw.reshape(-1), gb.reshape(-1)]) / dist.get_world_size())
        mine = torch.empty_like(layer.shard)
        compat.reduce_scatter_single(mine, flat)
        return gx, mine, None


def my_fsdp():
    return sh.fsdp(MyGathered)
