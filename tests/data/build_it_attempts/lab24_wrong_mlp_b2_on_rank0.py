"""Lab 24 (tensor parallelism), task `my_mlp()` (section 3 "The backward" cell).

WRONG.
Property violated: "Replicated parameters (b2) must get the same gradient on every rank". The learner adds b2
on rank 0 only, before the all_reduce (the lab's forward answer mentions this variant), with a correct g
(sum forward, identity backward) and f (identity forward, sum backward). y is right everywhere, every split
gradient and grad_x are right, but b2 takes no part in ranks 1.. N-1's graph: their grad_b2 is None (the
copies of b2 drift apart at the first optimizer step).
Values: right at N = 1 only; at N >= 2 grad_b2 is None on every rank but 0 (y, grad_x, grad_w1, grad_b1,
grad_w2 right).
Source: the lab's own remark in section 2 ("section 3 shows what it costs b2's gradient"); Megatron's
RowParallelLinear adds its bias after the reduction for this reason.
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
    """forward: x as it is; backward: sum the ranks' partial dL/dx."""

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
    w, s = tp.weights(), tp.shard(rank, world)
    w1, b1 = w["w1"][s].requires_grad_(), w["b1"][s].requires_grad_()
    w2, b2 = w["w2"][:, s].requires_grad_(), w["b2"].requires_grad_()
    x, target = tp.batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(_F.apply(x), w1, b1))
    y = _G.apply(F.linear(hidden, w2, b2 if rank == 0 else None))
    tp.loss_fn(y, target).backward()
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": w1.grad, "grad_b1": b1.grad, "grad_w2": w2.grad,
            "grad_b2": b2.grad}
