"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

WRONG.
Property violated: 1F1B's warm-up: stage r runs p-1-r forwards before its first backward. With warm-up 0 on
every stage (and isend, so nothing deadlocks), each stage does F(i) then waits for B(i): micro-batch i goes all
the way through the pipeline and back before i+1 starts anywhere -- the serial schedule. Every stage holds at
most ONE micro-batch, so the "no stage holds more than p-r (+1)" rule is satisfied; it only bounds from above.
Values: gradients right for every m (1, 2, 4, 8), at 4 stages. Only the schedule / timeline (the number of
forwards before the first backward, or the bubble) catches it.
Source: the 1F1B description read as "one forward, one backward" from the start (PipeDream-Flush's warm-up
phase is what makes it a pipeline; Narayanan et al. 2021, fig. 4).
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_1f1b(m=8):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = 0
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
