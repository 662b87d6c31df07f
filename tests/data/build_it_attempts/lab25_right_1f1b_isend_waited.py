"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

CORRECT (the fix the lab describes, written with every request kept and waited at the end, and each sent
tensor a private clone kept alive with its request). Warm-up min(p-1-r, m), then one forward / one backward
(oldest stashed micro-batch), then the cool-down backwards. Stage r holds at most p-r micro-batches.
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
        reqs.append((t, dist.isend(t, dst=dst)))

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
    for _, r in reqs:
        r.wait()
    return pp.finish(p)
