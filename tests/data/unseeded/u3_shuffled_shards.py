"""Evaluate a model over a shuffled, rank-sharded validation set.

The validation indices are shuffled once, then strided across ranks
(perm[rank::world]) so each rank scores a disjoint slice.  Per-sample
visit counts are summed with all_reduce to verify that every sample was
scored exactly once before the global accuracy is reported.

Launch: torchrun --nproc-per-node 4 u3_shuffled_shards.py
"""
import datetime
import sys

import numpy as np
import torch
import torch.distributed as dist

N_VAL = 256


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    X = torch.randn(N_VAL, 8)
    labels = (X.sum(dim=1) > 0).long()
    model = torch.nn.Linear(8, 2)

    perm = np.random.permutation(N_VAL)           # shuffle validation order
    mine = torch.from_numpy(perm[rank::world])
    with torch.no_grad():
        pred = model(X[mine]).argmax(dim=1)
    stats = torch.tensor([(pred == labels[mine]).sum().item(), len(mine)], dtype=torch.float64)
    visits = torch.zeros(N_VAL)
    visits[mine] += 1
    dist.all_reduce(stats)
    dist.all_reduce(visits)

    dup, missing = int((visits > 1).sum()), int((visits == 0).sum())
    if dup or missing:
        print(f"[rank {rank}] coverage check failed: {dup} samples scored twice, "
              f"{missing} never scored", file=sys.stderr)
        dist.destroy_process_group()
        sys.exit(1)
    if rank == 0:
        print(f"val accuracy {stats[0] / stats[1]:.4f} over {int(stats[1])} samples")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
