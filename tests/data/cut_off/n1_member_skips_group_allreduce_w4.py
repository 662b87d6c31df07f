# case: member_skips_group_allreduce_w4
# label: negative
# world: 4
# culprits: 2
# waiting: 1,3
# kind: missing_ranks
"""NEGATIVE (not "left early"): a genuinely missing rank.  World 4, group
[1, 2, 3].  All ranks create the group and pass a world barrier (so every
connection is established and nobody can be cut off).  Then rank 2, a MEMBER
of the group, returns early on a condition ("empty shard") and never calls the
group's all_reduce, while members 1 and 3 do.  Ranks 1 and 3 wait in the
all_reduce for rank 2 (timeout, or an error once rank 2's sockets close).
Rank 0 is not a member and finishes normally after the barrier.
Modelled on the common "one rank skips a collective on a data-dependent
condition" hang; contrast with the left-early cases modelled on
https://github.com/pytorch/pytorch/issues/53270
"""
import datetime
import os

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    group = dist.new_group([1, 2, 3])
    dist.barrier()
    if rank == 0:
        print(f"rank {rank}: not in group, done OK", flush=True)
        dist.destroy_process_group()
        return
    shard_len = 0 if rank == 2 else 8
    if rank == 2 and shard_len == 0:
        print(f"rank {rank}: empty shard, skipping all_reduce", flush=True)
        dist.destroy_process_group()
        return
    t = torch.ones(shard_len)
    dist.all_reduce(t, group=group)
    print(f"rank {rank}: all_reduce={t[0].item()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
