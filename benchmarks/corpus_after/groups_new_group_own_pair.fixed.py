# case: groups_new_group_own_pair
# fixed: every rank creates both subgroups, [0, 3] then [1, 2], and keeps the one it belongs to
# world: 4
# nccl: yes
"""Hierarchical communication: ranks 0 and 3 talk in one subgroup and ranks 1 and 2 in another. Every rank calls
new_group for both pairs, in the same order, and then uses the group it belongs to, so each subgroup all_reduce
connects exactly its two members.
From: https://github.com/pytorch/pytorch/issues/130102
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    grp_ranks = [0, 3] if rank in (0, 3) else [1, 2]
    pg_timeout = datetime.timedelta(seconds=10)
    pairs = {
        (0, 3): dist.new_group(ranks=[0, 3], timeout=pg_timeout),
        (1, 2): dist.new_group(ranks=[1, 2], timeout=pg_timeout),
    }
    grp = pairs[tuple(grp_ranks)]

    x = torch.tensor([float(rank * rank)])
    dist.all_reduce(x, group=grp)
    expected = sum(r * r for r in grp_ranks)
    assert x.item() == expected, f"rank {rank}: subgroup {grp_ranks} sum {x.item()} != {expected}"
    print(f"rank {rank}: subgroup {grp_ranks} sum {x.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
