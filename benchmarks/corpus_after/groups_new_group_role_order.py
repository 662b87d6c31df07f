# case: groups_new_group_role_order
# class: groups
# names: groups
# world: 3
# culprits: 2
# cause: dist.new_group, line 29
# nccl: yes
"""Ranks 0 and 1 train, rank 2 evaluates; a "train" group [0, 1] and an "eval" group [0, 1, 2] are created by every
rank, but each rank creates the group of its own role first. new_group must be called in the same order everywhere:
the group's identity is the position of the call, so on rank 2 the eval group is group #1 while on ranks 0 and 1 it
is group #2 (and #1 is the train group). The eval group's rendezvous then waits for a rank that registered under a
different name, and the ranks time out. From: https://github.com/cmriat/Etha/pull/111 (per-side creation order
"cross-wires the communicators")"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
GROUP_SPEC = {"train": [0, 1], "eval": [0, 1, 2]}
ROLE = ["train", "train", "eval"]


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    groups = {}
    for name in sorted(GROUP_SPEC, key=lambda n: n != ROLE[rank]):
        groups[name] = dist.new_group(GROUP_SPEC[name], timeout=TIMEOUT)
    if rank in GROUP_SPEC["train"]:
        grad = torch.ones(4)
        dist.all_reduce(grad, group=groups["train"])
    score = torch.tensor([float(rank)])
    dist.all_reduce(score, group=groups["eval"])
    assert score.item() == 3.0, f"rank {rank}: eval score sum {score.item()}"
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
