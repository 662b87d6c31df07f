"""Lab 24 (tensor parallelism), task `my_mlp()` (section 3 "The backward" cell).

WRONG (the values are right; the operator is not in autograd).
Property violated: f ("before the split") must be part of the backward: an autograd operation whose backward
sums the ranks' partial dL/dx. Here g is a proper autograd Function, but f is replaced by a
`dist.all_reduce(x.grad)` after loss.backward() has returned. For this one-block model, where x is a leaf, the
numbers are the same; in any real network the layers before the MLP (embeddings, a previous block) would
already have received the PARTIAL gradient during backward, so they would be wrong. It also makes the
all_reduce after the backward, not in it.
Values: right at every N (1, 2, 3, 4, 8). Only a check that the input-gradient reduction happens inside
backward (e.g. a layer before the MLP, or a non-leaf input) catches it.
Source: patching gradients after backward instead of writing the conjugate operator (Megatron's f / g,
"copy_to_tensor_model_parallel_region").
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


def my_mlp():
    rank, world = tp.setup()
    w, s = tp.weights(), tp.shard(rank, world)
    w1, b1 = w["w1"][s].requires_grad_(), w["b1"][s].requires_grad_()
    w2, b2 = w["w2"][:, s].requires_grad_(), w["b2"].requires_grad_()
    x, target = tp.batch()
    x.requires_grad_()
    hidden = F.gelu(F.linear(x, w1, b1))
    y = _G.apply(F.linear(hidden, w2)) + b2
    tp.loss_fn(y, target).backward()
    dist.all_reduce(x.grad)  # f, done by hand after the fact
    return {"y": y.detach(), "grad_x": x.grad, "grad_w1": w1.grad, "grad_b1": b1.grad, "grad_w2": w2.grad,
            "grad_b2": b2.grad}
