"""Lab 24 (tensor parallelism), task `my_mlp()` (section 3 "The backward" cell).

WRONG (values right up to rounding; the backward is wrong and patched afterwards).
Property violated: g's backward must pass dL/dy through unchanged, and f must sum dL/dx in the backward. The
learner keeps the starting code's `differentiable_all_reduce` (whose backward ALL-REDUCES dL/dy, so every
gradient below it comes out N times too large), sees the factor 2 on 2 ranks, and after backward divides
grad_w1, grad_b1, grad_w2 by the world size and fixes grad_x by all_reduce then / N. Numbers match; the
backward makes an extra all_reduce (of dL/dy) and the model's gradients are N times too large until patched
(any earlier layer would get N times its gradient).
Values: right (allclose) at every N (1, 2, 3, 4, 8).
Source: the lab's section 3 answer and Dao-AILab/flash-attention#1244 (which all_reduce backward is right);
"divide by world size until it matches" is the common patch.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox.course import tensor_parallel as tp
from sandbox.compat import differentiable_all_reduce  # torch.distributed.nn.functional.all_reduce, on any torch


def my_mlp():
    rank, world = tp.setup()
    w, s = tp.weights(), tp.shard(rank, world)
    w1, b1 = w["w1"][s].requires_grad_(), w["b1"][s].requires_grad_()
    w2, b2 = w["w2"][:, s].requires_grad_(), w["b2"].requires_grad_()
    x, target = tp.batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(x, w1, b1))
    y = differentiable_all_reduce(F.linear(hidden, w2)) + b2
    tp.loss_fn(y, target).backward()
    with torch.no_grad():
        for t in (w1, b1, w2):
            t.grad /= world
        dist.all_reduce(x.grad)
        x.grad /= world
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": w1.grad, "grad_b1": b1.grad, "grad_w2": w2.grad,
            "grad_b2": b2.grad}
