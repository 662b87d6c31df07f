"""sampler-set-epoch: DistributedSampler(shuffle=True) without sampler.set_epoch(epoch): every epoch visits the
data in the same order.

Source: a pitfall documented by PyTorch itself: DistributedSampler's docstring (torch/utils/data/distributed.py)
says "calling the set_epoch() method at the beginning of each epoch before creating the DataLoader iterator is
necessary to make shuffling work properly across multiple epochs. Otherwise, the same ordering will be always
used." Nothing warns when it is missing.

Symptom: none that stops the run. Every rank finishes, the loss goes down; but each epoch is the same sequence of
batches on every rank (log the first few indices of each epoch: they repeat), and the per-epoch loss curves have the
same shape epoch after epoch. Here each rank returns the indices it visited per epoch; every epoch after the first
differs from what DistributedSampler gives with set_epoch (the single-process reference).

Root cause: DistributedSampler shuffles with a torch.Generator seeded `seed + epoch`, and `epoch` is an attribute
that only set_epoch() changes: left at 0, the permutation is the same every epoch. (It must be the same on every
rank, which is why it is a seed and not fresh randomness: each rank takes every world_size-th index of one shared
permutation, so the shards never overlap.) No collective is involved, so no rank waits and nothing disagrees.

Fix: call `sampler.set_epoch(epoch)` at the start of every epoch, before iterating the DataLoader (its iterator
asks the sampler for its order when the epoch's first batch is drawn). Not `set_epoch(0)` each time, and not before
a list of batches built once outside the epoch loop: both give the same order again.

How to notice it in a real job: log the first indices (or a hash of the index list) of each epoch on rank 0;
equal lines mean a repeated order. Per-epoch loss curves with the same shape are the other sign. The sandbox's
contract checks see collectives only and cannot flag it: a run's order against a reference, as here, is the check.

The same on GPUs (NCCL): the sampler runs on each rank's CPU and makes no collective, so the backend does not
matter; this bug has no --gpu form.

Run: python -m sandbox.repro sampler-set-epoch
    broken: OK: 2 ranks in 1.45 s
      expected: ok, != single-process reference -> as documented
    fixed: OK: 2 ranks in 1.37 s
      expected: ok, = single-process reference -> as documented
"""
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from sandbox.bugs import Bug, Expect, init

BUG = Bug(
    slug="sampler-set-epoch", title="DistributedSampler without set_epoch: every epoch in the same order",
    source="DistributedSampler's docstring (torch/utils/data/distributed.py): call set_epoch() every epoch",
    symptom="every epoch visits the data in the same order; the per-epoch loss curves repeat",
    world_size=2, min_world_size=2, needs="cpu",
    broken=Expect("ok", differs_from_reference=True, note="finishes; every epoch repeats epoch 0's order"),
    fixed=Expect("ok", matches_reference=True))

SAMPLES, BATCH, EPOCHS, SEED = 24, 4, 3, 0


def dataset():
    """Each sample carries its own index, so a rank can say which samples it visited and in what order."""
    g = torch.Generator().manual_seed(1)
    return TensorDataset(torch.arange(SAMPLES), torch.randn(SAMPLES, 4, generator=g))


def one_epoch(loader, epoch, rank):
    """Visit every batch of this rank's shard; log the first indices and the first batch's loss, averaged over the
    ranks (the log line that shows the bug: with it, every epoch starts the same)."""
    seen, first_loss = [], None
    for index, x in loader:
        seen += index.tolist()
        if first_loss is None:
            first_loss = x.pow(2).mean().reshape(1)  # stand-in for the training step's loss
    dist.all_reduce(first_loss)
    print(f"rank {rank} epoch {epoch}: first indices {seen[:4]}, "
          f"first batch loss {first_loss.item() / dist.get_world_size():.3f}")
    return seen


def broken():
    init()  # gloo (the sampler runs on the CPU whatever the backend)
    rank = dist.get_rank()
    sampler = DistributedSampler(dataset(), shuffle=True, seed=SEED)
    loader = DataLoader(dataset(), batch_size=BATCH, sampler=sampler)
    order = {}
    for epoch in range(EPOCHS):
        # BUG: no sampler.set_epoch(epoch): the sampler shuffles with seed + 0 every epoch
        order[f"epoch {epoch}"] = one_epoch(loader, epoch, rank)
    dist.destroy_process_group()
    return order


def fixed():
    init()
    rank = dist.get_rank()
    sampler = DistributedSampler(dataset(), shuffle=True, seed=SEED)
    loader = DataLoader(dataset(), batch_size=BATCH, sampler=sampler)
    order = {}
    for epoch in range(EPOCHS):
        sampler.set_epoch(epoch)  # FIX: a new permutation each epoch, the same one on every rank
        order[f"epoch {epoch}"] = one_epoch(loader, epoch, rank)
    dist.destroy_process_group()
    return order


def reference(world_size):
    """What DistributedSampler(shuffle=True, seed=SEED) with set_epoch(epoch) gives each rank, worked out by hand as
    torch/utils/data/distributed.py does it (one shared permutation seeded seed + epoch, padded to a multiple of
    world_size, every world_size-th index from the rank's own), with no torch.distributed."""
    per_rank = [{} for _ in range(world_size)]
    total = -(-SAMPLES // world_size) * world_size
    for epoch in range(EPOCHS):
        g = torch.Generator()
        g.manual_seed(SEED + epoch)
        indices = torch.randperm(SAMPLES, generator=g).tolist()
        indices += indices[:total - SAMPLES]  # drop_last=False pads with the first indices
        for rank in range(world_size):
            per_rank[rank][f"epoch {epoch}"] = indices[rank:total:world_size]
    return {"per_rank": per_rank}
