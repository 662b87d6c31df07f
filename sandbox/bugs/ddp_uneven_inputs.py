"""ddp-uneven-inputs: 13 batches split into contiguous shards over 4 ranks: the last rank has 4 batches, the others
3, and under DistributedDataParallel its fourth step waits for peers that have stopped training.

Source: PyTorch's "Distributed Training with Uneven Inputs Using the Join Context Manager" tutorial and
torch/distributed/algorithms/join.py (`Join`); DDP's join hook is in torch/nn/parallel/distributed.py
(`_DDPJoinHook`). The example from our own files: examples/framework/ddp_uneven.py.

Symptom: ranks 0-2 finish; rank 3 fails in `loss.backward()` of its last step with "Connection closed by peer"
on gloo (on NCCL it waits there until the watchdog's timeout). Where the short ranks do not exit but go on to
evaluate or save, the job hangs instead.

Root cause: DDP's backward all_reduces the gradients, bucket by bucket, and every rank must take part in every
one of them. The shards are cut without padding or drop_last, so rank 3 runs one more step than its peers; its
fourth backward makes a gradient all_reduce that no other rank makes: it has no partner.

Fix: wrap the training loop in `with Join([model]):` (torch.distributed.algorithms.join). A rank that has run out
of data then "joins": until the last rank is done it shadows each of the others' gradient all_reduces with zeros,
and at the end DDP broadcasts the final model from the last rank to finish, so every rank holds the same weights.
Join costs one small all_reduce per step (every rank asks whether a peer has joined) and it changes the maths of
the extra steps: a gradient is still divided by the initial world size (4), so rank 3's extra batch moves the
weights by a quarter of its own gradient (`divide_by_initial_world_size=False` divides by the ranks still
training instead). When the number of batches is known up front, equal shards are the better fix: a
`DistributedSampler(drop_last=True)` (or pad, the sampler's default), or each rank truncating to the smallest
count agreed with `all_reduce(n, op=MIN)`. Every step is then a real average over every rank, and nothing is
shadowed. Join is for what cannot be counted up front (a stream, an IterableDataset, filtering on the fly) or for
when no batch may be dropped.

On GPUs (NCCL): NCCL does not tell rank 3 that its peers have gone: its extra gradient all_reduce is queued on the
GPU and never completes, so rank 3 hangs (in its next call that waits for the GPU, or in destroy_process_group)
until NCCL's watchdog aborts it at the process group's timeout. The sandbox names it from the calls in flight
(the Flight Recorder sees DDP's all_reduces). Join works the same way on NCCL.

Run: python -m sandbox.repro ddp-uneven-inputs
    broken: ERROR [uneven_steps]: 4 ranks in 15.16 s
      Rank 3 ran more training steps than ranks 0-2: DDP's backward (`loss.backward()` at
      sandbox/bugs/ddp_uneven_inputs.py:94) made a different number of gradient all_reduces on each (ranks 0-2
      made 3; rank 3 made 4), so rank 3's all_reduce #9 of group [0, 1, 2, 3] (9 elements) has no partner:
      ranks 0-2 are already finished (exit 0). Under DDP every rank must run the same number of steps: give
      every rank the same number of batches (DistributedSampler(drop_last=True), equal shards), or wrap the
      loop in `with model.join():` (torch.distributed.algorithms.join.Join), which lets a rank that ran out of
      data shadow the others' all_reduces.
      expected: error or hang, uneven_steps, culprits [3], error /Connection closed by peer|ran more training steps/ -> as documented
    fixed: OK: 4 ranks in 18.90 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist
from torch.distributed.algorithms.join import Join
from torch.nn.parallel import DistributedDataParallel as DDP

from sandbox.bugs import Bug, Expect, Gpu, init

BUG = Bug(
    slug="ddp-uneven-inputs", title="DDP with a different number of batches on one rank",
    source="DDP and uneven inputs: PyTorch's Join tutorial, torch/distributed/algorithms/join.py",
    symptom="one rank fails or hangs in loss.backward() of its last step while the others have finished",
    world_size=4, min_world_size=2, needs="cpu",
    broken=Expect(("error", "hang"), "uneven_steps", [3],
                  error=r"Connection closed by peer|ran more training steps"),
    fixed=Expect("ok", matches_reference=True),
    gpu=Gpu(broken=Expect(("hang", "error", "crash"), "uneven_steps", "last"),
            fixed=Expect("ok", matches_reference=True)))

BATCHES, LR = 13, 0.1  # 13 batches over 4 ranks: 3, 3, 3 and 4 (over 2 ranks: 6 and 7)


def shard(rank, world, device="cpu"):
    """This rank's contiguous share of the BATCHES batches (x, y), as a loader without padding cuts them."""
    out = []
    for i in range(rank * BATCHES // world, (rank + 1) * BATCHES // world):
        g = torch.Generator().manual_seed(i)
        out.append((torch.randn(4, 8, generator=g).to(device), torch.randn(4, 1, generator=g).to(device)))
    return out


def make_model(device="cpu"):
    torch.manual_seed(0)
    return torch.nn.Linear(8, 1).to(device)


def weights(model):
    return {name: p.detach().cpu().tolist() for name, p in model.named_parameters()}


def broken():
    device = init()  # gloo on CPU; NCCL with --gpu
    rank, world = dist.get_rank(), dist.get_world_size()
    net = make_model(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    for x, y in shard(rank, world, device):  # BUG: the last rank's shard holds one batch more than the others'
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    out = weights(net)
    dist.destroy_process_group()
    return out


def fixed():
    device = init()
    rank, world = dist.get_rank(), dist.get_world_size()
    net = make_model(device)
    model = DDP(net, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    with Join([model]):  # FIX: a rank out of data shadows the others' gradient all_reduces until all are done
        for x, y in shard(rank, world, device):
            loss = torch.nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    out = weights(net)
    dist.destroy_process_group()
    return out


def reference(world_size):
    """The same steps in one process: step i averages the gradients of the ranks that still have a batch i, over
    the initial world size (a rank that has joined counts as zeros), as DDP under Join does."""
    model = make_model()
    shards = [shard(r, world_size) for r in range(world_size)]
    for i in range(max(len(s) for s in shards)):
        model.zero_grad()
        for s in shards:
            if i < len(s):
                x, y = s[i]
                (torch.nn.functional.mse_loss(model(x), y) / world_size).backward()
        with torch.no_grad():
            for p in model.parameters():
                p -= LR * p.grad
    return weights(model)
