"""isend-unwaited: a rank posts an isend, never waits on it, and leaves.

Source: a pitfall of the primitive itself. `isend` (torch/distributed/distributed_c10d.py) returns "a distributed
request object" and warns that modifying the tensor "before the request completes causes undefined behavior": the
request must be waited on.

Symptom: the receiver fails with `Connection closed by peer` (or, with the handle dropped mid-step, the data
is simply never there).

Root cause: `isend` only posts the send. With gloo nothing moves until the receiver posts its recv; if the
sender's process ends first, its half of the pair closes and the message is gone. Here the receiver is made to
post its recv only after the sender has exited (it watches the sender's pid), so this happens every time rather
than when the timing is unlucky.

Fix: keep the Work and `wait()` on it before leaving (or before touching the tensor).

On GPUs (NCCL): the message is not lost. The sender returns from `isend`, but its process does not end while the
send is still pending on the GPU (2 H200s, torch 2.11: still alive 20 s after returning), so the receiver gets the
data once it posts its recv, and the broken variant completes, with the `async_unwaited` warning. Were the recv
never posted, the sender would never exit: the contract (wait on the request) is broken on NCCL too.

Run: python -m sandbox.repro isend-unwaited
    broken: ERROR [rank_error]: 2 ranks in 1.23 s
      Rank 1 raised RuntimeError: Read error [127.0.0.1]:47514: Connection reset by peer at
      sandbox/bugs/isend_unwaited.py:73. Rank 0's isend to rank 1 at sandbox/bugs/isend_unwaited.py:58 was
      never waited on: rank 0 left with it still pending, which closed the connection rank 1 was receiving on.
      Warnings: async_unwaited, not_destroyed.
      expected: error, error /Connection closed by peer|Connection reset by peer/ -> as documented
    fixed: OK: 2 ranks in 1.27 s
      expected: ok, = single-process reference -> as documented
"""
import os
import time

import torch
import torch.distributed as dist

from sandbox import compat
from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="isend-unwaited", title="An isend whose sender leaves before it is waited on",
    source="primitive pitfall: isend requests must be waited on (torch/distributed/distributed_c10d.py, isend)",
    symptom="the receiver fails with 'Connection closed by peer'",
    world_size=2, min_world_size=2, needs="cpu",
    broken=Expect("error", error=r"Connection closed by peer|Connection reset by peer"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect("ok", output=r"its process has not ended", warns="async_unwaited"),
            fixed=Expect("ok", matches_reference=True)))


def _exchange(wait_before_leaving):
    device = init(timeout_s=30)  # gloo on CPU; NCCL with --gpu
    rank = dist.get_rank()
    store = compat.default_store()  # init_process_group's store: the pid passes outside the trace
    if rank == 0:
        store.set("sender_pid", str(os.getpid()))
        work = dist.isend(torch.arange(4, dtype=torch.float32, device=device), dst=1)
        if wait_before_leaving:
            work.wait()  # FIX: the send is complete before this rank moves on
            dist.destroy_process_group()
        return "sent"  # BUG (broken variant): leaves with the send still pending
    pid = int(store.get("sender_pid"))
    if not wait_before_leaving:  # make the race deterministic: receive only once the sender is gone
        patience = 3 if device.type == "cuda" else 20  # on NCCL the sender's process cannot end: see the docstring
        deadline = time.monotonic() + patience
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.01)
        if _alive(pid):
            print(f"rank 1: rank 0 returned without waiting, yet its process has not ended after {patience} s "
                  "(its send is still running on the GPU); receiving now", flush=True)
    got = torch.empty(4, device=device)
    dist.irecv(got, src=0).wait()
    dist.destroy_process_group()
    return got.tolist()


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] not in "ZX"  # a zombie has already closed its sockets
    except (FileNotFoundError, ProcessLookupError):  # gone before the open, or reaped between open and read
        return False


def broken():
    return _exchange(wait_before_leaving=False)


def fixed():
    return _exchange(wait_before_leaving=True)


def reference(world_size):
    return {"per_rank": ["sent", [0.0, 1.0, 2.0, 3.0]]}
