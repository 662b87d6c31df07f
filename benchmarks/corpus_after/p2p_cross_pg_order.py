# case: p2p_cross_pg_order
# class: p2p/cycle
# names: p2p_cycle
# world: 4
# culprits: 3
# cause: dist.all_gather, line 38
# nccl: yes
"""2-D sharded embedding step: each rank all-gathers its pooled embedding inside its shard group ({0,1} or {2,3})
and all-reduces the dense gradient over the whole world. To overlap, each rank issues "whichever is ready first",
and readiness depends on the rank's own batch: rank 3 holds the short tail batch, so it issues the shard-group
all_gather first while ranks 0-2 issue the world all_reduce first. Rank 3 waits in {2,3} for rank 2, rank 2 waits in
the world all_reduce for rank 3: a wait cycle across two process groups, ended only by the timeout.
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

    # issue the communication whose input is ready first (lookup cost ~ batch size, dense cost fixed)
    ready = {"sparse": batch_sizes[rank], "dense": 4}
    for kind in sorted(ready, key=ready.get):
        if kind == "sparse":
            dist.all_gather(gathered, pooled, group=shard_pg)
        else:
            dist.all_reduce(dense_grad)

    print(f"rank {rank}: dense {dense_grad[0].item()} gathered {[g[0].item() for g in gathered]}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
