"""Lab 24 (tensor parallelism), task `my_mlp()` (section 3 "The backward" cell).

WRONG.
Property violated: rank r keeps one N-th of the hidden features. Correct f and g Functions, but the split is
hard-coded for 2 ranks (`slice(8 * rank, 8 * rank + 8)`).
Values: at N = 2 everything is right. At N = 3, 4, 8, y, grad_x and grad_b2 are still right (ranks >= 2 hold
empty slices and add zeros), but ranks 0 and 1 return 8-row gradients and ranks >= 2 empty ones, where each
rank should return its 16/N rows: the per-rank gradient values/shapes are wrong. At N = 1 half the features
are missing (y wrong).
Source: hard-coding the lab's 2-rank table.
"""
import torch
import torch.distributed as dist
import torch.nn.functional as F

from sandbox.course import tensor_parallel as tp
from sandbox.compat import differentiable_all_reduce  # torch.distributed.nn.functional.all_reduce, on any torch


class _G(torch.autograd.Function):
    """forward: sum the partial outputs over the ranks; backward: pass dL/dy through."""

    @staticmethod
    def forward(ctx, t):
        t = t.clone()
        dist.all_reduce(t)
        return t

    @staticmethod
    def backward(ctx, grad):
        return grad


class _F(torch.autograd.Function):
    @staticmethod
    def forward(ctx, t):
        return t.view_as(t)

    @staticmethod
    def backward(ctx, grad):
        grad = grad.clone()
        dist.all_reduce(grad)
        return grad


def my_mlp():
    rank, world = tp.setup()
    w = tp.weights()
    s = slice(8 * rank, 8 * rank + 8)
    w1, b1 = w["w1"][s].requires_grad_(), w["b1"][s].requires_grad_()
    w2, b2 = w["w2"][:, s].requires_grad_(), w["b2"].requires_grad_()
    x, target = tp.batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(_F.apply(x), w1, b1))
    y = _G.apply(F.linear(hidden, w2)) + b2
    tp.loss_fn(y, target).backward()
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": w1.grad, "grad_b1": b1.grad, "grad_w2": w2.grad,
            "grad_b2": b2.grad}
