"""Data-parallel linear regression with per-epoch dataset thinning.

Each rank owns a contiguous shard of the data set.  To regularise, every epoch
we keep each sample of the shard with probability KEEP_P (random thinning),
then iterate over the kept samples in mini-batches, averaging gradients with
all_reduce.  After the epoch all ranks meet at a barrier and rank 0 reports.

Launch: torchrun --nproc-per-node 4 u2_thinned_epoch.py
"""
import datetime

import numpy as np
import torch
import torch.distributed as dist

SHARD = 400
BATCH = 4
KEEP_P = 0.8


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    g = torch.Generator().manual_seed(1234 + rank)
    X = torch.randn(SHARD, 16, generator=g)
    y = X @ torch.arange(16.0) + 0.1 * torch.randn(SHARD, generator=g)
    w = torch.zeros(16, requires_grad=True)

    keep = np.flatnonzero(np.random.rand(SHARD) < KEEP_P)   # thin the shard
    n_batches = len(keep) // BATCH
    for b in range(n_batches):
        idx = torch.from_numpy(keep[b * BATCH:(b + 1) * BATCH])
        loss = ((X[idx] @ w - y[idx]) ** 2).mean()
        loss.backward()
        dist.all_reduce(w.grad)
        with torch.no_grad():
            w -= 0.01 * w.grad / world
            w.grad.zero_()

    dist.barrier()
    if rank == 0:
        print(f"epoch done: {n_batches} batches, w[:4]={w[:4].tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
