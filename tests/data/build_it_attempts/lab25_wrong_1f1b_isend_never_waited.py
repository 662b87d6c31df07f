"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

WRONG.
Property violated: "Keep the requests and wait() on every one before finish (a request never waited on is a
contract the check holds you to)". The deadlock is fixed by `dist.isend`, but the requests are dropped.
Values: gradients right (usually, the sent tensors are private clones) for every m, at 4 stages. Only a check
of unwaited works catches it.
Source: the same half-fix as lab 05 (isend-unwaited); torch.distributed.isend docs.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_1f1b(m=8):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = min(world - 1 - rank, m)
    stash, reqs = [], []

    def send(t, dst):
        t = t.detach().clone()
        dist.isend(t, dst=dst)  # request dropped

    def forward_step(i):
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
            send(y, rank + 1)
        stash.append((x, y))

    def backward_step():
        x, y = stash.pop(0)  # the oldest micro-batch
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            send(x.grad, rank - 1)

    for i in range(warmup):
        forward_step(i)
    for i in range(warmup, m):
        forward_step(i)
        backward_step()
    for _ in range(warmup):
        backward_step()
    return pp.finish(p)
