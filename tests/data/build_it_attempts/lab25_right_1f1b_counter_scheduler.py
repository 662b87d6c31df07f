"""Lab 25 (pipeline), task `my_1f1b(m=8)` (section 3 "1F1B" cell).

CORRECT (alternative: one scheduler loop instead of warm-up / steady / cool-down loops).
Each stage counts the forwards and backwards it has done and decides every step: forward while it is in its
warm-up (fewer than min(p-1-r, m) forwards) or while forwards - backwards < p - r (and forwards remain), else
backward of the oldest stashed micro-batch. That yields exactly 1F1B: p-1-r forwards, then F/B in turn, then
the remaining backwards; with m < p-r it is all forwards then all backwards (holds m). Stage r holds at most
min(p-r, m) micro-batches. Sends are isend on private clones, kept and waited before `pp.finish`; receives are
blocking. The warm-up test is redundant with the in-flight test (kept because it reads like the lab's text).
Deadlock: none, same order of sends/receives as the reference isend version (checked on a model of gloo's
rendezvous send for m = 1, 2, 4, 8; the file itself was not run).
Source: counter-driven schedulers in pipeline runtimes (a `WorkScheduler(stage, num_stages, num_steps, done_fwds,
done_bwds)` that answers "forward or backward?" each step, in PipeDream-derived research code), as opposed to
Megatron's three loops.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_1f1b(m=8):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    warmup = min(world - 1 - rank, m)
    limit = world - rank  # p - r: micro-batches this stage may hold
    stash, reqs = [], []

    def send(t, dst):
        t = t.detach().clone()
        reqs.append((t, dist.isend(t, dst=dst)))

    done_f = done_b = 0
    while done_b < m:
        if done_f < m and (done_f < warmup or done_f - done_b < limit):
            i = done_f
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
            done_f += 1
        else:
            x, y = stash.pop(0)  # the oldest micro-batch
            if last:
                pp.backward(y)
            else:
                grad = torch.empty_like(y)
                dist.recv(grad, src=rank + 1)
                pp.backward(y, grad)
            if not first:
                send(x.grad, rank - 1)
            done_b += 1
    for _, req in reqs:
        req.wait()
    return pp.finish(p)
