# case: groups_reduce_dst_global
# fixed: name the destination by its rank inside the group (group_dst=0) instead of passing group rank 0 as dst
# world: 4
# nccl: yes
"""Hybrid sharding with two shard groups, [0, 1] and [2, 3]: each group reduces its per-parameter minimum to the
group's first member for logging. The destination is given as group_dst=0, the rank inside the group, so each group
reduces to its own first member. From: https://github.com/allenai/OLMo/pull/551"""
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
    dist.reduce(param_min, op=dist.ReduceOp.MIN, group=shard_group, group_dst=0)
    if dist.get_rank(shard_group) == 0:
        print(f"rank {rank}: shard-group min {param_min.tolist()}", flush=True)
    step_done = torch.ones(1)
    dist.all_reduce(step_done)
    assert step_done.item() == dist.get_world_size()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
