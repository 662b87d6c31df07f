"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

CORRECT (alternative: receive ahead).
Warm-up min(p-1-r, m), then one forward / one backward (oldest stashed micro-batch), then the cool-down. In the
steady state, right after forward i, the stage posts `dist.irecv` for the NEXT micro-batch's activation (i+1)
before it runs backward, so that activation is in flight while the backward computes; forward i+1 waits on that
request instead of calling a blocking recv. Sends are `isend` on private clones, kept and waited before
`pp.finish`; every posted irecv is waited (only posted when i+1 < m). Stage r holds at most p-r micro-batches,
plus at most one activation receive posted ahead (the lab's rule: "no more but one posted ahead").
Deadlock: none. Every send is non-blocking, and each wait on the prefetched receive sits where the blocking recv
of the reference isend version sits, so no stage waits on anything it did not already wait on there (checked
on a model of gloo's send-completes-when-the-recv-is-posted rule for m = 1, 2, 4, 8; the file itself was not run).
Source: Megatron-LM's 1F1B (`forward_backward_pipelining_without_interleaving`) receives the next input ahead,
with `send_backward_recv_forward` / a `recv_forward` before the steady loop; torch.distributed.irecv docs.
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
    ahead = {}  # micro-batch index -> (buffer, request) of an activation received ahead

    def send(t, dst):
        t = t.detach().clone()
        reqs.append((t, dist.isend(t, dst=dst)))

    def post_recv(i):
        buf = torch.empty_like(data[i][0])
        ahead[i] = (buf, dist.irecv(buf, src=rank - 1))

    def forward_step(i):
        if first:
            x = data[i][0]
        else:
            if i not in ahead:
                post_recv(i)
            x, req = ahead.pop(i)
            req.wait()
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
        if not first and i + 1 < m:
            post_recv(i + 1)  # receive ahead: the next activation travels during this backward
        backward_step()
    for _ in range(warmup):
        backward_step()
    for _, req in reqs:
        req.wait()
    return pp.finish(p)
