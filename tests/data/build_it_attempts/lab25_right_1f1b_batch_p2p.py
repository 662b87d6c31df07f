"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

CORRECT (alternative: Megatron-LM style).
Each step of the steady state pairs the send with the receive it must not block: after a forward, "send
forward, receive backward" is posted as one `dist.batch_isend_irecv` (the activation to r+1 and the gradient
of the oldest micro-batch from r+1), both waited; warm-up forwards and cool-down backwards use isend (kept and
waited) and blocking recv. Warm-up min(p-1-r, m); stage r holds at most p-r micro-batches.
Source: Megatron-LM `send_forward_recv_backward` (p2p_communication.py) and torch.distributed.batch_isend_irecv.
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

    def recv_input(i):
        if first:
            return data[i][0]
        x = torch.empty_like(data[i][0])
        dist.recv(x, src=rank - 1)
        return x.requires_grad_()

    def forward(i):
        x = recv_input(i)
        y = pp.forward(p, x)
        if last:
            y = pp.loss_of(y, data[i][1], m)
        stash.append((x, y))
        return y

    def backward(grad):
        x, y = stash.pop(0)
        if last:
            pp.backward(y)
        else:
            pp.backward(y, grad)
        if not first:
            g = x.grad.clone()
            reqs.append((g, dist.isend(g, dst=rank - 1)))

    def send_forward(y):
        out = y.detach().clone()
        reqs.append((out, dist.isend(out, dst=rank + 1)))

    for i in range(warmup):
        y = forward(i)
        send_forward(y)
    for i in range(warmup, m):
        y = forward(i)
        if last:
            backward(None)
        else:
            out = y.detach().clone()
            grad = torch.empty_like(out)
            for r in dist.batch_isend_irecv([dist.P2POp(dist.isend, out, rank + 1),
                                             dist.P2POp(dist.irecv, grad, rank + 1)]):
                r.wait()
            backward(grad)
    for _ in range(warmup):
        grad = None
        if not last:
            grad = torch.empty_like(stash[0][1])
            dist.recv(grad, src=rank + 1)
        backward(grad)
    for _, r in reqs:
        r.wait()
    return pp.finish(p)
