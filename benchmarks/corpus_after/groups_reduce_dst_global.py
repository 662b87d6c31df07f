# case: groups_reduce_dst_global
# class: groups
# names: groups
# world: 4
# culprits: 2,3
# cause: dist.reduce, line 28
# nccl: yes
"""Hybrid sharding with two shard groups, [0, 1] and [2, 3]: each group reduces its per-parameter minimum to the
group's first member for logging, written as dist.reduce(t, 0, group=shard_group). The dst argument of reduce is a
GLOBAL rank, not a rank inside the group, so for the [2, 3] group torch raises "Global rank 0 is not part of group"
on ranks 2 and 3, which die, while ranks 0 and 1 (for whom global 0 happens to be right) go on to the next
world-wide collective and wait there for the dead ranks. From: https://github.com/allenai/OLMo/pull/551"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
SHARD_GROUPS = [[0, 1], [2, 3]]


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    groups = [dist.new_group(ranks, timeout=TIMEOUT) for ranks in SHARD_GROUPS]
    shard_group = groups[rank // 2]
    param_min = torch.tensor([10.0 - rank, 3.0 * rank])
    dist.reduce(param_min, 0, op=dist.ReduceOp.MIN, group=shard_group)
    if dist.get_rank(shard_group) == 0:
        print(f"rank {rank}: shard-group min {param_min.tolist()}", flush=True)
    step_done = torch.ones(1)
    dist.all_reduce(step_done)
    assert step_done.item() == dist.get_world_size()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
