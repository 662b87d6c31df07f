"""Lab 25 (pipeline), task `my_gpipe(m=4)` (section 1 "Your GPipe" cell).

CORRECT (alternative).
GPipe with asynchronous sends: every forward (isend of the activation, request kept), then every backward,
last micro-batch first (isend of x.grad, request kept); receives are blocking. Every request is waited on
before `pp.finish`. The tensors sent are kept alive until their request completes.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_gpipe(m=4):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    stash, reqs = [], []
    for i in range(m):
        if first:
            x = data[i][0]
        else:
            x = torch.empty_like(data[i][0])
            dist.recv(x, src=rank - 1)
            x.requires_grad_()
        y = pp.forward(p, x)
        if last:
            y = pp.loss_of(y, data[i][1], m)
        else:
            out = y.detach().clone()
            reqs.append((out, dist.isend(out, dst=rank + 1)))
        stash.append((x, y))
    for x, y in reversed(stash):
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            g = x.grad.clone()
            reqs.append((g, dist.isend(g, dst=rank - 1)))
    for _, r in reqs:
        r.wait()
    return pp.finish(p)
