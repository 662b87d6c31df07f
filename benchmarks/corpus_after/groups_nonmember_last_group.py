# case: groups_nonmember_last_group
# class: groups
# names: groups
# world: 4
# culprits: 0,1
# cause: dist.all_reduce, line 29
# nccl: yes
"""Two tensor-parallel pairs, [0, 1] and [2, 3], average a gradient shard inside their pair. Every rank creates every
pair group in the same order (as new_group requires) but keeps only the value the loop assigned last, so ranks 0 and
1 hold the NON_GROUP_MEMBER sentinel that new_group returns for the [2, 3] group. all_reduce on a group the rank is
not in only warns and returns without communicating, so ranks 0 and 1 keep their own unreduced gradient and their
pair mean is wrong, while ranks 2 and 3 are fine. From: https://github.com/pytorch/pytorch/pull/67639 (closes
pytorch/pytorch#67600: collectives on non-member group objects silently do nothing)"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
PAIRS = [[0, 1], [2, 3]]


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    for ranks in PAIRS:
        pair_group = dist.new_group(ranks, timeout=TIMEOUT)
    grad = torch.full((4,), float(rank + 1))
    dist.all_reduce(grad, group=pair_group)
    grad /= 2
    mine = next(p for p in PAIRS if rank in p)
    expected = sum(r + 1 for r in mine) / 2
    assert torch.allclose(grad, torch.full((4,), expected)), (
        f"rank {rank}: pair-mean gradient {grad[0].item()} != {expected}")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
