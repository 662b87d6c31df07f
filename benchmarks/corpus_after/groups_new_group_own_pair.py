# case: groups_new_group_own_pair
# class: groups
# names: groups
# world: 4
# culprits: 0,1,2,3
# cause: dist.new_group, line 24
# nccl: yes
"""Hierarchical communication: ranks 0 and 3 should talk in one subgroup and ranks 1 and 2 in another, so each rank
calls new_group with only the pair it belongs to. new_group must be called by every rank, with the same ranks, in
the same order: here the two calls are different calls that share one group id, so the two pairs rendezvous as one
"group" and the subgroup all_reduce pairs up the wrong ranks (wrong sums) or breaks the connections.
From: https://github.com/pytorch/pytorch/issues/130102
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    grp_ranks = [0, 3] if rank in (0, 3) else [1, 2]
    grp = dist.new_group(ranks=grp_ranks, timeout=datetime.timedelta(seconds=10))

    x = torch.tensor([float(rank * rank)])
    dist.all_reduce(x, group=grp)
    expected = sum(r * r for r in grp_ranks)
    assert x.item() == expected, f"rank {rank}: subgroup {grp_ranks} sum {x.item()} != {expected}"
    print(f"rank {rank}: subgroup {grp_ranks} sum {x.item()}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
