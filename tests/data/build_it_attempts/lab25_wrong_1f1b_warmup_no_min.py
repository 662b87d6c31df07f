"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

WRONG.
Property violated: works for any number of micro-batches m. Warm-up is p-1-r without the `min(..., m)`: with
fewer micro-batches than the warm-up needs (m < p-1-r), stage r tries to run forward number m, which does not
exist (IndexError on stage 0 at m = 1 or 2 with 4 stages; the others hang).
Values: right at m >= 3 (so at the lab's m = 8 and m = 4); error/hang at m = 1, 2 (4 stages).
Source: Megatron-LM's schedule takes `min(pipeline_size - rank - 1, num_microbatches)`; dropping the min is
a common transcription error.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_1f1b(m=8):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = world - 1 - rank
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
