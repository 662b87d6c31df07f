# case: groups_nonmember_last_group
# fixed: every rank still creates every group, but keeps the group it is a member of instead of the last one created
# world: 4
# nccl: yes
"""Two tensor-parallel pairs, [0, 1] and [2, 3], average a gradient shard inside their pair. Every rank creates every
pair group in the same order and keeps the one it belongs to, so each all_reduce runs inside the rank's own pair.
From: https://github.com/pytorch/pytorch/pull/67639"""
import datetime

import torch
import torch.distributed as dist

TIMEOUT = datetime.timedelta(seconds=10)
PAIRS = [[0, 1], [2, 3]]


def main():
    dist.init_process_group("gloo", timeout=TIMEOUT)
    rank = dist.get_rank()
    for ranks in PAIRS:
        group = dist.new_group(ranks, timeout=TIMEOUT)
        if rank in ranks:
            pair_group = group
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
