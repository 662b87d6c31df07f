"""Lab 25 (pipeline), task `my_gpipe(m=4)` (section 1 "Your GPipe" cell).

WRONG.
Property violated: GPipe runs EVERY forward, then every backward. This runs each micro-batch forward through
all stages and straight back (F0 B0 F1 B1 ... on every stage): each stage waits for the whole pipeline to
finish micro-batch i before it starts i+1, so no two stages ever work at once (bubble (p-1)/p, not
(p-1)/(m+p-1)). Blocking send/recv, no deadlock, and only one micro-batch held at a time, so a
"holds at most" memory rule cannot flag it.
Values: gradients right for every m, at 4 stages. Only the schedule (order of sends/recvs, or the timeline)
catches it.
Source: the serial "gradient accumulation across stages" schedule that people write before micro-batch
pipelining (GPipe paper, naive model parallelism).
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_gpipe(m=4):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    for i in range(m):
        if first:
            x = data[i][0]
        else:
            x = torch.empty_like(data[i][0])
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        y = pp.forward(p, x)
        if last:
            pp.backward(pp.loss_of(y, data[i][1], m))
        else:
            dist.send(y.detach(), dst=rank + 1)
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)
    return pp.finish(p)
