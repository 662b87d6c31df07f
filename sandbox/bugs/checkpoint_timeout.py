r"""checkpoint-timeout: rank 0 saves a checkpoint for longer than the process group's timeout while the other
ranks wait for it at a barrier.

Source: the usual checkpoint step of a training loop (`if rank == 0: torch.save(model.state_dict(), path)`, then
`dist.barrier()` so no rank reads the file before it is complete), with the timeout every collective of a group
gets from `init_process_group(timeout=...)` (torch/distributed/distributed_c10d.py; 30 minutes for gloo, 10 for
NCCL by default). A checkpoint of a large model on a slow or busy (network) filesystem takes longer than that.

Symptom: every rank but 0 fails at the barrier after the save, with gloo's
`RuntimeError: [.../gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting 2000ms for recv operation to
complete` (here the timeout is 2 s so it shows in seconds; in a real job `Timed out waiting 1800000ms`), while
rank 0, the one that caused it, prints nothing: it is still writing.

Root cause: a collective waits for every rank of its group for at most the group's timeout. Rank 0 is not hung and
not missing: it is running its own code, the save (here `slow_save`, a `torch.save` followed by a sleep that stands
in for a slow filesystem, 6 s every time), outside any torch.distributed call, while its peers' barrier clock
runs. The peers that time out are the symptom; rank 0's save line is the cause.

Fix: agree on a longer wait for the save, on every rank: the fixed variant makes a second group for the checkpoint
step with its own, longer timeout (`dist.new_group(timeout=timedelta(minutes=30))`: every rank creates it, in the
same order), makes that group's first barrier while every rank is still there (NCCL connects a group at its first
collective), and waits for the save at a barrier of that group, keeping the short timeout for training's
collectives. Other fixes: save asynchronously (`torch.distributed.checkpoint.async_save`, or a thread of rank 0 that
writes a CPU copy of the state while training goes on, waited for before the next save); give the default group a
timeout longer than the slowest save (on every rank: a timeout raised on rank 0 alone changes nothing for the ranks
that wait); `dist.monitored_barrier(timeout=...)` (gloo only) in place of the barrier, which does not make the save
faster but says who to look at: with rank 0 late, the others raise `Rank 1 successfully reached monitoredBarrier,
but received errors while waiting for send/recv from rank 0. Please check rank 0 logs for faulty rank.`

On GPUs (NCCL): no --gpu form yet. Measured on 2 H100s (torch 2.11): the barrier is a one-element all_reduce on
the GPU; rank 1's watchdog prints `Watchdog caught collective operation timeout: WorkNCCL(SeqNum=5,
OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=2000) ran for 2062 milliseconds before timing out.` 2 s in
and aborts the communicator, but the process lives on: its barrier returns once rank 0 arrives, and the job hangs
at the next collective, on the aborted communicator. The sandbox does not yet read the watchdog's line as the
failure, so there it names that later hang (at its run timeout), not rank 0's save. The fix holds on NCCL, with
its first barrier made while every rank is present: NCCL connects a new group at the group's first collective,
through the store, under the default group's timeout (without that barrier, rank 1 failed with "store->get('0')
got error: wait timeout after 2000ms").

Run: python -m sandbox.repro checkpoint-timeout
    broken: ERROR [straggler]: 2 ranks in 4.67 s
      Not a hang: rank 1 timed out in barrier #4 of group [0, 1] at sandbox/bugs/checkpoint_timeout.py:132
      (Timed out waiting 2000ms for recv operation to complete) while rank 0 was running its own code at
      sandbox/bugs/checkpoint_timeout.py:94 (in slow_save), called from sandbox/bugs/checkpoint_timeout.py:131
      (in broken), outside any torch.distributed call. Rank 0 is the cause: not hung and not missing, but
      slower than the process group's timeout at that line; the ranks that timed out only waited for it. Give
      that step more time on every rank (a group of its own made with new_group(timeout=...), or a longer
      init_process_group timeout on all ranks), move it out of the way of the others (an asynchronous save,
      torch.distributed.checkpoint.async_save), or wait with monitored_barrier(timeout=...), whose error names
      the rank to look at.
      expected: error, straggler, culprits [0], error /Timed out waiting \d+ms for recv operation to complete|Watchdog caught collective operation timeout/ -> as documented
    fixed: OK: 2 ranks in 7.52 s
      expected: ok, = single-process reference -> as documented
"""
import datetime
import os
import shutil
import tempfile
import time

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, init

BUG = Bug(
    slug="checkpoint-timeout", title="Rank 0 saves a checkpoint while the others time out at a barrier",
    source="saving on rank 0, then dist.barrier(), under init_process_group(timeout=) (torch/distributed)",
    symptom="every rank but 0 fails at the barrier after the checkpoint: Timed out waiting 2000ms for recv operation",
    world_size=2, min_world_size=2, needs="cpu",
    broken=Expect("error", "straggler", [0],
                  error=r"Timed out waiting \d+ms for recv operation to complete|Watchdog caught collective operation"
                        r" timeout",
                  note="rank 0 is busy saving, outside any call, while the others time out"),
    fixed=Expect("ok", matches_reference=True))

PG_TIMEOUT_S = 2.0   # the group's timeout: small so it reproduces in seconds (gloo's default is 30 minutes)
SLOW_FS_S = 6.0      # the save (a slow filesystem): rank 0's stack is read ~1.4 s after the timeout, well inside it
SAVE_TIMEOUT = datetime.timedelta(seconds=60)  # the checkpoint group's timeout: longer than any save here


def make_model():
    """The model, made before the group exists, with the process's first backward: that one loads autograd's
    kernels (about 1 s on a CUDA build of torch), which under load could outlast the 2 s timeout on its own."""
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2)
    torch.nn.Linear(1, 1)(torch.ones(1)).sum().backward()  # warm-up, outside the group's clock
    return model


def slow_save(state, path):
    """torch.save, then a fixed sleep: a stand-in for a slow (network) filesystem, labelled as such."""
    torch.save(state, path)
    time.sleep(SLOW_FS_S)  # a slow filesystem: the write takes SLOW_FS_S seconds


def train_step(model, device):
    """One data-parallel step: the gradients are averaged with all_reduce (the group's timeout applies)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(rank)
    model(torch.randn(3, 4, generator=g).to(device)).pow(2).mean().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
        p.grad /= world
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad


def checkpoint_dir(device):
    """A fresh dir made by rank 0 (in the sandbox's run dir, gone with the run), its path sent to every rank."""
    path = [tempfile.mkdtemp(prefix="ckpt-", dir=os.environ.get("SANDBOX_RUN_DIR")) if dist.get_rank() == 0 else None]
    dist.broadcast_object_list(path, src=0, device=device)
    return path[0]


def resume(path):
    """What every rank does after the checkpoint: read it back (all ranks start the next stage from it)."""
    state = torch.load(path)
    return {k: v.flatten().tolist() for k, v in state.items()}


def broken():
    model = make_model()
    device = init(timeout_s=PG_TIMEOUT_S)  # gloo on CPU; NCCL with --gpu
    model = model.to(device)
    train_step(model, device)
    d = checkpoint_dir(device)
    path = os.path.join(d, "model.pt")
    if dist.get_rank() == 0:
        slow_save(model.state_dict(), path)  # BUG: longer than the group's timeout, while the others wait below
    dist.barrier()  # BUG: the other ranks time out here, PG_TIMEOUT_S after they arrive
    out = resume(path)
    dist.barrier()
    if dist.get_rank() == 0:
        shutil.rmtree(d)
    dist.destroy_process_group()
    return out


def fixed():
    model = make_model()
    device = init(timeout_s=PG_TIMEOUT_S)
    ckpt_group = dist.new_group(timeout=SAVE_TIMEOUT)  # FIX: a group for the checkpoint step, with a longer timeout
    dist.barrier(group=ckpt_group)  # FIX: its first call while every rank is here (NCCL connects a group lazily)
    model = model.to(device)
    train_step(model, device)
    d = checkpoint_dir(device)
    path = os.path.join(d, "model.pt")
    if dist.get_rank() == 0:
        slow_save(model.state_dict(), path)
    dist.barrier(group=ckpt_group)  # FIX: every rank waits for the save under the checkpoint group's timeout
    out = resume(path)
    dist.barrier(group=ckpt_group)
    if dist.get_rank() == 0:
        shutil.rmtree(d)
    dist.destroy_process_group()
    return out


def reference(world_size):
    """The same step in one process on every rank's data at once: the checkpoint every rank reads back."""
    model = make_model()
    x = torch.cat([torch.randn(3, 4, generator=torch.Generator().manual_seed(r)) for r in range(world_size)])
    # the mean over ranks of each rank's mean loss: the averaged gradient of the distributed step
    (model(x).pow(2).mean(dim=1).view(world_size, 3).mean(dim=1).mean()).backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= 0.1 * p.grad
    return {k: v.flatten().tolist() for k, v in model.state_dict().items()}
