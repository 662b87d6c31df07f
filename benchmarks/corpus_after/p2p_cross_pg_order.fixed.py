# case: p2p_cross_pg_order
# fixed: every rank issues the world all_reduce and the shard-group all_gather in one fixed order, not by local readiness
# world: 4
# nccl: yes
"""2-D sharded embedding step: each rank all-gathers its pooled embedding inside its shard group ({0,1} or {2,3})
and all-reduces the dense gradient over the whole world. The two collectives are issued in the same fixed order on
every rank, so no rank can wait in one group while its peer waits in the other.
From: https://github.com/meta-pytorch/torchrec/pull/4149
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    pg_timeout = datetime.timedelta(seconds=10)
    shard_groups = [dist.new_group([0, 1], timeout=pg_timeout), dist.new_group([2, 3], timeout=pg_timeout)]
    shard_pg = shard_groups[rank // 2]

    batch_sizes = [6, 6, 6, 2]  # the last rank gets the tail of the epoch
    ids = torch.arange(batch_sizes[rank])
    pooled = torch.full((4,), float(ids.sum()))
    dense_grad = torch.ones(16) * (rank + 1)
    gathered = [torch.empty(4), torch.empty(4)]

    # same order on every rank, whatever the local readiness
    for kind in ("dense", "sparse"):
        if kind == "sparse":
            dist.all_gather(gathered, pooled, group=shard_pg)
        else:
            dist.all_reduce(dense_grad)

    print(f"rank {rank}: dense {dense_grad[0].item()} gathered {[g[0].item() for g in gathered]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
