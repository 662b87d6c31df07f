"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

WRONG.
Property violated: the warm-up count is p-1-r, so stage r holds at most p-r micro-batches (the lab's rule allows
one more, "posted ahead"). This uses `min(world + 1 - rank, m)`: two forwards too many before the first backward.
At m = 8 the warm-ups are 5, 4, 3, 2 and the stages hold 6, 5, 4, 3 (should be 4, 3, 2, 1): two over on every
stage, beyond the one-ahead slack. At m = 2 every warm-up is capped to 2, i.e. all forwards then all backwards:
stages 0-2 hold 2 (= m, allowed) and stage 3 holds 2 where 1 is expected (one over, inside the slack).
Deadlock: none; isend requests are kept and waited, receives blocking (checked on a model of gloo's rendezvous
send for m = 1, 2, 4, 8; the file itself was not run).
Values: gradients right for every m (1, 2, 4, 8), at 4 stages (forwards and backwards both in micro-batch order,
oldest popped). Only the in-flight rule catches it, and only at m = 8 (m = 4: 4, 4, 4, 3 against 4, 3, 2, 1).
Source: constructed (an over-long warm-up, "two extra in flight to keep the pipe full"), the two-too-many
sibling of lab25_wrong_1f1b_warmup_off_by_one; not taken from a specific bug report.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_1f1b(m=8):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = min(world + 1 - rank, m)
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
    for _, req in reqs:
        req.wait()
    return pp.finish(p)
