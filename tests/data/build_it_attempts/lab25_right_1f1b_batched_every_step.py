"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

CORRECT (alternative: every message through batch_isend_irecv, Megatron-LM's structure).
All communication goes through one helper, `communicate(...)`, which builds that step's list of `dist.P2POp`
(isend/irecv to the previous and/or next stage), posts it with ONE `dist.batch_isend_irecv` and waits every
request it returns before going on. The schedule is Megatron's non-interleaved 1F1B: warm-up min(p-1-r, m)
forwards ("recv forward", forward, "send forward"), one "recv forward" before the steady state, then per steady
step forward, "send forward + recv backward" (one batch), backward of the oldest micro-batch, and "send backward +
recv forward" (one batch; the last steady step only sends backward), then the cool-down backwards ("recv
backward", backward, "send backward"). Stage r holds at most p-r micro-batches.
Deadlock: none, although every isend is waited at once: wherever two neighbours send to each other at the same
time, each posted its receive in the same batch as its send, so both sends find a posted receive; a lone send
("send forward" in warm-up, "send backward" in cool-down) always meets a neighbour that reaches the matching
receive without first waiting on this stage (checked on a model of gloo's rendezvous send for m = 1, 2, 4, 8;
the file itself was not run). Empty op lists are never passed to batch_isend_irecv.
Source: Megatron-LM `p2p_communication._communicate` / `send_forward_recv_backward` /
`send_backward_recv_forward` and `schedules.forward_backward_pipelining_without_interleaving`;
torch.distributed.batch_isend_irecv / P2POp docs.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_1f1b(m=8):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = min(world - 1 - rank, m)
    stash = []

    def communicate(send_next=None, send_prev=None, recv_prev_like=None, recv_next_like=None):
        """One step's point-to-point messages, posted as one batch, every request waited."""
        ops, got_prev, got_next = [], None, None
        if send_prev is not None:
            ops.append(dist.P2POp(dist.isend, send_prev, rank - 1))
        if recv_prev_like is not None:
            got_prev = torch.empty_like(recv_prev_like)
            ops.append(dist.P2POp(dist.irecv, got_prev, rank - 1))
        if send_next is not None:
            ops.append(dist.P2POp(dist.isend, send_next, rank + 1))
        if recv_next_like is not None:
            got_next = torch.empty_like(recv_next_like)
            ops.append(dist.P2POp(dist.irecv, got_next, rank + 1))
        if ops:
            for req in dist.batch_isend_irecv(ops):
                req.wait()
        return got_prev, got_next

    def input_like(i):  # shape of micro-batch i's activation, or None on stage 0 (nothing to receive)
        return None if first else data[i][0]

    def forward(i, x):
        if first:
            x = data[i][0]
        else:
            x.requires_grad_()
        y = pp.forward(p, x)
        if last:
            y = pp.loss_of(y, data[i][1], m)
        stash.append((x, y))
        return None if last else y.detach().clone()

    def grad_like():  # shape of the oldest stashed output's gradient, or None on the last stage
        return None if last else stash[0][1]

    def backward(grad):
        x, y = stash.pop(0)  # the oldest micro-batch
        if last:
            pp.backward(y)
        else:
            pp.backward(y, grad)
        return None if first else x.grad.clone()

    for i in range(warmup):
        x, _ = communicate(recv_prev_like=input_like(i))          # recv forward
        out = forward(i, x)
        communicate(send_next=out)                                 # send forward
    x = None
    if warmup < m:
        x, _ = communicate(recv_prev_like=input_like(warmup))     # recv forward
    for i in range(warmup, m):
        out = forward(i, x)
        stash_grad_like = grad_like()
        _, grad = communicate(send_next=out, recv_next_like=stash_grad_like)  # send forward, recv backward
        gx = backward(grad)
        if i == m - 1:
            communicate(send_prev=gx)                              # send backward
            x = None
        else:
            x, _ = communicate(send_prev=gx, recv_prev_like=input_like(i + 1))  # send backward, recv forward
    for _ in range(warmup):
        _, grad = communicate(recv_next_like=grad_like())          # recv backward
        gx = backward(grad)
        communicate(send_prev=gx)                                  # send backward
    return pp.finish(p)
