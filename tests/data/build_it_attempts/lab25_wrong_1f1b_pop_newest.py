"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

WRONG.
Property violated: "the backward takes the oldest stashed micro-batch". The warm-up (min(p-1-r, m)), steady state
and cool-down are right, and isend requests are kept and waited, but `backward_step` uses `stash.pop()` (the
NEWEST micro-batch). The next stage returns gradients in forward order (point-to-point messages are matched in
order, not by micro-batch), so a stage with more than one micro-batch stashed applies the gradient of one
micro-batch to the activations of another: at m = 8 stage 2 back-propagates the gradients of micro-batches
0, 1, ..., 7 through micro-batches 1, 2, ..., 7, 0, and stages 1 and 0 do worse. The last stage (one in flight)
is unaffected.
Deadlock / shapes: none. The sequence of sends and receives is the reference's, and every micro-batch has the
same shape (16/m rows of width 8), so every call matches, every graph is back-propagated exactly once, and no
shape error is raised (checked on a model of gloo's rendezvous send; the file itself was not run).
Values: gradients WRONG at m = 8 and m = 2 (at m = 2 stages 0-2 pop 1 before 0 while stage 3 sends 0 first);
right only at m = 1. Stage 3's gradients stay right. Caught by the reference comparison, as in the lab's
exercise 2.
Source: Python's `list.pop()` defaults to the last element; the GPipe cell's `reversed(stash)` (newest first)
carried over to 1F1B.
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
        x, y = stash.pop()  # the newest micro-batch, not the oldest
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
    for _, req in reqs:
        req.wait()
    return pp.finish(p)
