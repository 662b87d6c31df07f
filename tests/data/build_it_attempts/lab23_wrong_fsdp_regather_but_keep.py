"""Lab 23 (sharding), task `MyGathered` (section 3 "FSDP" cell; run by `my_fsdp()` = `sh.fsdp(MyGathered)`).

WRONG.
Property violated: the full copy must be let go as soon as the forward returns. The learner added the second
`layer.gather()` in backward (so the count of all_gathers is the reference's: one per layer in forward, one
in backward) but left `w` in save_for_backward: every layer's full weight is held from its forward to its
backward, so the peak is the whole model, not 1/N plus one layer.
Values: right at every world size dividing the batch (1, 2, 3, 4, 6, 8). A check that only COUNTS all_gathers
passes it; one that looks at what the forward saves (or at memory held between forward and backward)
catches it.
Source: the FSDP "reshard_after_forward" property (torch.distributed.fsdp docs: FULL_SHARD frees the
unsharded parameters after forward; SHARD_GRAD_OP keeps them, i.e. ZeRO-2, not ZeRO-3).
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
        ctx.save_for_backward(x, w)  # still kept
        ctx.layer = layer
        return x @ w.T + b

    @staticmethod
    def backward(ctx, gy):
        x, _kept = ctx.saved_tensors
        layer = ctx.layer
        w, _ = layer.gather()  # gathered again, as the rule counts
        grad = torch.cat([(gy.T @ x).reshape(-1), gy.sum(0)])
        mine = torch.empty_like(layer.shard)
        compat.reduce_scatter_single(mine, layer.padded(grad))
        return gy @ w, mine / dist.get_world_size(), None


def my_fsdp():
    return sh.fsdp(MyGathered)
