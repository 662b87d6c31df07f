"""Rank programs for tests/test_tracer.py: what the tracer records, and that it never gets in the way. Each is a
plain function the ranks import; the process group is created by the function itself, as a user's code would."""
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist

SUB = [1, 2]  # the subgroup of `positional`: its group ranks 0 and 1 are global ranks 1 and 2


def _init(timeout=30):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=timeout))
    return dist.get_rank(), dist.get_world_size()


def positional():
    """Every argument that matters passed by position (3 ranks), as much real code does."""
    rank, _ = _init()
    g = dist.new_group(SUB)
    SUM = dist.ReduceOp.SUM
    t = torch.ones(4)
    dist.broadcast(t, 0)  # the world group, root 0
    if rank in SUB:
        two = [torch.empty(4), torch.empty(4)]
        dist.broadcast(t, 2, g)
        dist.barrier(g)
        dist.all_reduce(t, SUM, g)
        dist.reduce(t, 1, SUM, g)
        dist.all_gather(two, t, g)
        dist.gather(t, two if rank == 1 else None, 1, g)
        dist.scatter(torch.empty(2), [torch.ones(2), torch.ones(2)] if rank == 2 else None, 2, g)
        dist.all_to_all_single(torch.empty(4), t, None, None, g)
        dist.broadcast_object_list([rank], 2, g)
        dist.gather_object(rank, [None, None] if rank == 1 else None, 1, g)
        dist.all_gather_object([None, None], rank, g)
        dist.scatter_object_list([None], [1, 2] if rank == 2 else None, 2, g)
        dist.broadcast(t, group=g, group_src=1)  # the root as a rank of the group: global rank 2
        dist.monitored_barrier(g)
        dist.all_reduce(t, SUM, g, True).wait()
        if rank == 1:
            dist.isend(t, 2, g, 7).wait()
            dist.send(t, 2, None, 3)
            dist.send_object_list([1], 2, g)
        else:
            dist.irecv(t, 1, g, 7).wait()
            dist.recv(t, 1, None, 3)
            dist.recv_object_list([None], 1, g)
    dist.barrier()
    dist.destroy_process_group()


def two_threads(calls=300):
    """Two threads of one rank call torch.distributed at once, each on its own group: one synchronous
    all_reduces, the other asynchronous ones and their waits."""
    rank, _ = _init()
    groups = dist.new_group([0, 1]), dist.new_group([0, 1])
    sys.setswitchinterval(1e-6)  # hand the GIL over as often as possible, so a race between the threads shows
    errors = []

    def loop(g, async_op):
        try:
            t = torch.ones(2)
            for _ in range(calls):
                w = dist.all_reduce(t, group=g, async_op=async_op)
                if async_op:
                    w.wait()
        except BaseException as e:  # noqa: BLE001  re-raised in the rank's main thread below
            errors.append(e)

    threads = [threading.Thread(target=loop, args=(g, i == 1)) for i, g in enumerate(groups)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=60)
    sys.setswitchinterval(0.005)
    if any(th.is_alive() for th in threads):
        raise RuntimeError("a thread is still calling all_reduce after 60 s")
    if errors:
        raise errors[0]
    dist.barrier()
    dist.destroy_process_group()


def bookkeeping_fails(busy_s=1.0):
    """The tracer's bookkeeping after a recv that worked fails; rank 0, the receiver, then computes for a while
    before the barrier. Its last trace line must not leave it 'inside' the recv, or the run looks hung. (The send's
    exit is only its exit line, the tracer's fast path: it has no bookkeeping to fail.)"""
    from sandbox.trace import inflight

    rank, _ = _init()
    real = inflight.on_cuda  # a helper the tracer calls after a synchronous call returned

    def broken(work):
        raise RuntimeError("planted: the tracer's bookkeeping fails")

    t = torch.full((2,), float(rank))
    inflight.on_cuda = broken  # fault injection into the tracer's insides, undone right after the call
    try:
        if rank == 0:
            dist.recv(t, 1)
        else:
            dist.send(t, 0)
    finally:
        inflight.on_cuda = real
    if rank == 0:
        time.sleep(busy_s)  # the rank's own work, longer than the run's hang_after; no distributed call pending
    dist.barrier()
    dist.destroy_process_group()
    return t.tolist()


def error_in_call():
    """torch rejects an argument inside a traced call; the user's code wraps the error in its own."""
    _init()
    try:
        dist.all_reduce([1.0, 2.0])  # BUG: a list, not a tensor
    except (TypeError, ValueError, RuntimeError) as e:
        raise RuntimeError("summing the losses failed") from e


def error_in_wait():
    """Rank 1 leaves without sending: rank 0's wait on its irecv fails."""
    rank, _ = _init()
    if rank == 0:
        dist.irecv(torch.zeros(1), 1).wait()


def returns_rank():
    return int(os.environ["RANK"])


def uninstalled():
    """The tracer taken out and put back inside a running rank: calls in between run untraced and still work."""
    from sandbox import trace

    _init()
    traced = dist.all_reduce
    trace.uninstall()
    t = torch.ones(2)
    restored = dist.all_reduce is traced.__sandbox_traced__ and not hasattr(torch.distributed.Work.wait,
                                                                            "__sandbox_traced__")
    dist.all_reduce(t, async_op=True).wait()  # untraced, through the restored Work.wait
    dist.all_reduce(t)
    trace.install()
    dist.all_reduce(t)  # traced again
    reinstalled = hasattr(dist.all_reduce, "__sandbox_traced__")
    dist.destroy_process_group()
    return restored, reinstalled, t.tolist()
