"""Lab 25 (pipeline), task `my_gpipe(m=4)` (section 1 "Your GPipe" cell).

CORRECT as GPipe (all forwards, then all backwards), but NOTE: its backwards run OLDEST micro-batch first on
every stage, where the lab's text says "every backward (last micro-batch first)". Every stage uses the same
order, so each gradient received matches the activation it is applied to (unlike the lab's exercise 2, where
only the last stage changes order), and the gradients are right for every m. GPipe itself does not fix the
backward order; this is here to test whether a check takes "last micro-batch first" as a requirement.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_gpipe(m=4):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    stash = []
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
            dist.send(y.detach(), dst=rank + 1)
        stash.append((x, y))
    for x, y in stash:  # oldest first, on every stage
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)
    return pp.finish(p)
