"""no-sync-accumulation: gradient accumulation under DDP's no_sync() with a per-rank number of micro-batches, so
the ranks synchronise their gradients on different micro-steps.

Source: DDP's no_sync() (torch/nn/parallel/distributed.py): "Within this context, gradients will be accumulated
on module variables, which will later be synchronized in the first forward-backward pass exiting the context." The
pass that synchronises must be the same on every rank; a count of micro-batches per optimizer step worked out from
each rank's own data (its token count, its sequence length, len(my_batches) // steps) breaks that.

Symptom: the run dies (or hangs) in `loss.backward()` on the rank that synchronises more often, after the others
have finished: gloo says `Connection closed by peer` (NCCL: a watchdog timeout of an ALLREDUCE). Before that, the
steps it did take averaged gradients of different micro-batches across ranks, silently.

Root cause: DDP all_reduces the gradients in the backward of the first pass outside no_sync(). Here rank r's
micro-batches hold 12 or 8 rows, and each rank derives its accumulation count from them (24 tokens per step: 2 on
rank 0, 3 on rank 1). Rank 0 leaves no_sync() on micro-steps 2, 4 and 6, rank 1 on 3 and 6: rank 0's first
all_reduce is met by rank 1's gradient of three micro-batches, and its third has no partner at all.

Fix: agree on the count before the loop: a constant, or the ranks' counts reduced with all_reduce(MIN) (MAX works
too); then every rank leaves no_sync() on the same micro-steps and makes as many optimizer steps. The result then
equals the single-process reference: each step averages the gradients of `accum` micro-batches on every rank.

On GPUs (NCCL): the same mismatch, but nothing raises at once: DDP's all_reduce is queued on the GPU stream and
the rank waits for it until NCCL's watchdog times the collective out (`Watchdog caught collective operation
timeout: WorkNCCL(SeqNum=..., OpType=ALLREDUCE ...)`, 10 minutes by default; the sandbox's run uses a short
group timeout) and aborts the process. The earlier, mismatched all_reduces complete with wrong gradients there too.

Run: python -m sandbox.repro no-sync-accumulation
    broken: ERROR [uneven_steps]: 2 ranks in 4.12 s
      Rank 0 left DDP's no_sync() more often than rank 1: the backward outside no_sync() (`loss.backward()` at
      sandbox/bugs/no_sync_accumulation.py:88) made a different number of gradient all_reduces on each (rank 1
      made 2; rank 0 made 3), so the ranks synchronised on different micro-steps (their earlier all_reduces
      averaged gradients of different micro-batches) and rank 0's all_reduce #8 of group [0, 1] has no
      partner: rank 1 is already finished (exit 0). With gradient accumulation every rank must leave no_sync()
      on the same micro-step: agree on the accumulation count before the loop (a constant, or all_reduce(MIN)
      of the per-rank counts); never derive it from one rank's own data.
      expected: error or crash, uneven_steps, culprits [0], error /Connection closed by peer|Connection reset by peer/ -> as documented
    fixed: OK: 2 ranks in 7.23 s
      expected: ok, = single-process reference -> as documented
"""
import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="no-sync-accumulation", title="Gradient accumulation with no_sync(): a per-rank number of micro-batches",
    source="DDP's no_sync() (torch/nn/parallel/distributed.py): the pass that synchronises must match on all ranks",
    symptom="rank 0 fails in loss.backward() after the others finished: Connection closed by peer",
    world_size=2, min_world_size=2, needs="cpu",
    broken=Expect(("error", "crash"), "uneven_steps", [0], error=r"Connection closed by peer|Connection reset by peer",
                  note="rank 0 syncs on micro-steps 2, 4, 6; rank 1 on 3, 6: its third all_reduce has no partner"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("error", "hang", "crash"), "uneven_steps", [0]), fixed=Expect("ok", matches_reference=True)))

MICRO_BATCHES, TOKENS_PER_STEP, LR = 6, 24, 0.1


def rows(rank):
    return 12 if rank % 2 == 0 else 8  # each rank's micro-batch size (its packed sequence length)


def micro_batches(rank, device="cpu"):
    """Rank `rank`'s micro-batches: as many on every rank, of its own size; the targets come from one true model."""
    g = torch.Generator().manual_seed(100 + rank)
    w = torch.linspace(-1, 1, 8).reshape(8, 1)
    xs = [torch.randn(rows(rank), 8, generator=g) for _ in range(MICRO_BATCHES)]
    return [(x.to(device), (x @ w).to(device)) for x in xs]


def setup():
    device = init()  # gloo on CPU; NCCL with --gpu
    torch.manual_seed(0)  # the same initial model on every rank
    model = DDP(torch.nn.Linear(8, 1).to(device), device_ids=[device] if device.type == "cuda" else None)
    return device, model, torch.optim.SGD(model.parameters(), lr=LR)


def train(model, opt, batches, accum):
    """Accumulate `accum` micro-batches per optimizer step: no_sync() for all but the last, whose backward
    all_reduces the summed gradients (DDP averages them over the ranks)."""
    for i, (x, y) in enumerate(batches):
        sync = (i + 1) % accum == 0
        with contextlib.nullcontext() if sync else model.no_sync():
            loss = F.mse_loss(model(x), y) / accum
            loss.backward()
        if sync:
            opt.step()
            opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()


def broken():
    device, model, opt = setup()
    batches = micro_batches(dist.get_rank(), device)
    accum = TOKENS_PER_STEP // len(batches[0][0])  # BUG: from this rank's own micro-batch size: 2 here, 3 there
    weights = train(model, opt, batches, accum)
    dist.destroy_process_group()
    return weights


def fixed():
    device, model, opt = setup()
    batches = micro_batches(dist.get_rank(), device)
    count = torch.tensor([TOKENS_PER_STEP // len(batches[0][0])], device=device)
    dist.all_reduce(count, op=dist.ReduceOp.MIN)  # FIX: every rank accumulates as many micro-batches (the fewest)
    weights = train(model, opt, batches, int(count))
    dist.destroy_process_group()
    return weights


def reference(world_size):
    """The same training in one process: each step sums the loss gradients of `accum` micro-batches (each loss
    divided by accum) on every rank and averages them over the ranks, as DDP's all_reduce does."""
    accum = min(TOKENS_PER_STEP // rows(r) for r in range(world_size))
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    data = [micro_batches(r) for r in range(world_size)]
    for step in range(MICRO_BATCHES // accum):
        for r in range(world_size):
            for x, y in data[r][step * accum:(step + 1) * accum]:
                (F.mse_loss(model(x), y) / accum / world_size).backward()
        opt.step()
        opt.zero_grad()
    return torch.cat([p.detach().flatten() for p in model.parameters()]).tolist()
