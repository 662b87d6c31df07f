# case: groups_new_group_role_order
# fixed: every rank creates the groups in the one fixed order of GROUP_SPEC, whatever its role
# world: 3
# nccl: yes
"""Ranks 0 and 1 train, rank 2 evaluates; a "train" group [0, 1] and an "eval" group [0, 1, 2] are created by every
rank in the same fixed order, so the groups' identities agree on every rank. From:
https://github.com/cmriat/Etha/pull/111"""
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
    for name in GROUP_SPEC:
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
