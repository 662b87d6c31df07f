"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

WRONG.
Property violated: 1F1B's peak: stage r holds p-r micro-batches (or m if fewer), "no fewer". This keeps Megatron's
warm-up min(p-1-r, m) but writes the steady state the way torch.distributed.pipelining's Schedule1F1B does
("1B1F": backward, then forward), which only works with torch's warm-up of min(p-r, m). Copied as is, the last
stage (warm-up 0) pops from an empty stash on its first steady step (IndexError on rank 3); this learner then
guarded the backward with `if stash:`. The result is correct 1F1B with a warm-up one too short: stage r runs
F0..F(p-2-r) then B/F in turn (the last stage F0 B0 F1 B1 ..., as it should), so stages 0, 1, 2 hold 3, 2, 1
micro-batches at m = 8 (should be 4, 3, 2), and stage 2 holds 1 at m = 2 (should be 2). Each stage still
receives its gradients in the order of its forwards (oldest popped), so nothing is mis-paired.
Deadlock: none with isend (kept, waited), checked on a model of gloo's rendezvous send for m = 1, 2, 4, 8.
With BLOCKING sends it would hang (ranks 1 and 2 each in a send to the other: rank 1 sends activation 1 while
rank 2 sends the gradient of micro-batch 0); this file uses isend. The file itself was not run.
Values: gradients right for every m (1, 2, 4, 8), at 4 stages. Only the in-flight ("no fewer") rule, or the
timeline, catches it; a "holds at most" upper bound alone does not.
Source: mixing two references: Megatron-LM's `num_warmup_microbatches = min(p - r - 1, m)` followed by
forward-then-backward, and torch's `Schedule1F1B` (warm-up `min(m, num_stages - stage_index)`, "# 1B1F phase").
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
    for i in range(warmup, m):  # 1B1F, as in torch's Schedule1F1B
        if stash:  # added after "IndexError: pop from empty list" on the last stage
            backward_step()
        forward_step(i)
    while stash:
        backward_step()
    for _, req in reqs:
        req.wait()
    return pp.finish(p)
