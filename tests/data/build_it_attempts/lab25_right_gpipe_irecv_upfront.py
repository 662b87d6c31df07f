"""Lab 25 (pipeline), task `my_gpipe(m=4)` (section 1 "Your GPipe" cell).

CORRECT (alternative: every activation receive posted up front).
Stages 1..p-1 post `dist.irecv` for all m activations before the first forward (one buffer each), then run the
forwards in order, waiting on request i just before forward i. Sends stay blocking (`dist.send`), as in the
lab's cell: they return at once, since the next stage's receives are already posted. Then every backward, last
micro-batch first, with the lab's missing line (`dist.send(x.grad, dst=rank - 1)`) in place. Every request is
waited (each irecv before its forward). Every stage runs all m forwards before its first backward, so it holds
all m micro-batches (GPipe's in-flight rule).
Deadlock: none. Forward messages only flow r -> r+1 and all their receives are posted first; a stage's
backward sends go r -> r-1 to a stage that has finished its forwards and waits in the matching recv (checked on
a model of gloo's rendezvous send for m = 1, 2, 4, 8; the file itself was not run).
Source: "post every receive early" (common MPI practice for pipelines; torch.distributed.irecv docs: it returns
a request to wait on). Not how torch's ScheduleGPipe does it (it waits each micro-batch's receive just before
its forward); it is here to test that a check does not count posted receives as a broken GPipe order.
"""
import torch
import torch.distributed as dist

from sandbox.course import pipeline as pp


def my_gpipe(m=4):
    rank, world, p = pp.start()
    data = pp.micro_batches(m)
    first, last = rank == 0, rank == world - 1
    pending = []
    if not first:
        for i in range(m):
            buf = torch.empty_like(data[i][0])
            pending.append((buf, dist.irecv(buf, src=rank - 1)))
    stash = []
    for i in range(m):
        if first:
            x = data[i][0]
        else:
            x, req = pending[i]
            req.wait()
            x.requires_grad_()
        y = pp.forward(p, x)
        if last:
            y = pp.loss_of(y, data[i][1], m)
        else:
            dist.send(y.detach(), dst=rank + 1)
        stash.append((x, y))
    for x, y in reversed(stash):
        if last:
            pp.backward(y)
        else:
            grad = torch.empty_like(y)
            dist.recv(grad, src=rank + 1)
            pp.backward(y, grad)
        if not first:
            dist.send(x.grad, dst=rank - 1)
    return pp.finish(p)
