"""Lab 25 (pipeline), task `my_gpipe(m=4)` (section 1 "Your GPipe" cell).

WRONG.
Property violated: GPipe runs EVERY forward, then every backward, on every stage. Stages 1..p-1 do; stage 0
(reasoning "stage 0 has no one to send its gradient to, so it can finish each micro-batch at once and keep only
one") back-propagates micro-batch i right after its forward, before sending micro-batch i+1. The lab's missing
line (`send(x.grad)` to the previous stage) is in place; sends and receives are blocking, as in the lab's cell.
Deadlock: YES, at m = 4 and m = 2 (any m >= 2). Rank 0 sends activation 0 and blocks in `recv` for the
gradient of micro-batch 0 from rank 1; rank 1, after forwarding micro-batch 0, blocks in `recv` for activation 1
from rank 0. A cycle of two RECEIVES (not of sends, unlike the lab's 1F1B hang), so isend would not help.
Ranks 2 and 3 wait behind them in `recv` for activation 1 (checked on a model of gloo's rendezvous send; the
file itself was not run).
Values: none (hangs); with m = 1 it would finish with right gradients.
Source: constructed: the serial one-micro-batch-at-a-time schedule (lab25_wrong_gpipe_one_at_a_time) applied to
the first stage only, from the lab's "stage 0 has no one to send to".
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_gpipe(m=4):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1

    def backward(x, y):
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)

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
        if first:
            backward(x, y)  # stage 0: straight back, nothing kept
        else:
            stash.append((x, y))
    for x, y in reversed(stash):  # stage 0's stash is empty
        backward(x, y)
    return pp.finish(p)
