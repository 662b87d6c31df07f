"""Lab 25 (pipeline), task `my_gpipe(m=4)` (section 1 "Your GPipe" cell).

WRONG.
Property violated: GPipe cuts the batch into m micro-batches and streams them through the stages. This
version (with the missing `send(x.grad)` added, so it does not hang) ignores m and sends the whole batch as
ONE micro-batch (`pp.micro_batches(1)`, `pp.loss_of(y, target, 1)`): no pipelining, the bubble is (p-1)/p,
every stage works alone.
Values: gradients right for every m (the loss over the whole batch is the same sum), at 4 stages. Only a check
of the number/size of the messages (m activations per stage) or the timeline/bubble catches it.
Source: "pipeline parallelism without micro-batches" is naive model parallelism (GPipe paper, Huang et al.
2019, fig. 2b vs 2c; PyTorch's pipelining docs).
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_gpipe(m=4):
    rank, world, p = pp.start()
    data = pp.micro_batches(1)  # the whole batch at once
    first, last = rank == 0, rank == world - 1
    x, target = data[0]
    if not first:
        x = torch.empty_like(x)
        dist.recv(x, src=rank - 1)
        x.requires_grad_()
    y = pp.forward(p, x)
    if last:
        pp.backward(pp.loss_of(y, target, 1))
    else:
        dist.send(y.detach(), dst=rank + 1)
        grad = torch.empty_like(y)
        dist.recv(grad, src=rank + 1)
        pp.backward(y, grad)
    if not first:
        dist.send(x.grad, dst=rank - 1)
    return pp.finish(p)
