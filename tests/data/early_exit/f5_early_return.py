# case: early_return
# world: 2
# culprits: 0
# waiting: 1
# call: init_process_group
"""Rank 0 returns early on a condition (it has no data shard).

`if rank == 0 and no_data: return` skips the rest of the program, including
anything collective, so rank 0 leaves right after init while rank 1 may still
be connecting. Error shape as in https://github.com/sehoffmann/dmlcloud/issues/47
and https://github.com/pytorch/pytorch/issues/53138 (gloo init failing in a
short-lived test process group).
"""
import datetime

import torch
import torch.distributed as dist

def shards(world):
    items = list(range(10))
    return [items[r::world] if r > 0 else [] for r in range(world)]


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    mine = shards(dist.get_world_size())[rank]
    no_data = len(mine) == 0
    if rank == 0 and no_data:
        print(f"rank {rank}: no data, nothing to do OK", flush=True)
        dist.destroy_process_group()
        return
    total = float(torch.tensor(mine, dtype=torch.float32).sum())
    print(f"rank {rank}: shard total {total} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
