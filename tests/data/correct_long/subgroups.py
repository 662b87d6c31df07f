"""Several process groups used alternately in a long loop (4 ranks).

Stresses: every rank creates the same groups in the same order (pairs [0,1]
and [2,3], pairs [0,2] and [1,3], and an explicit whole-world group), then each
step uses the pair groups, the cross groups and the world in turn. Each group
has its own call counter; the pairs run at their own pace between world calls,
so the two pairs' call #k are far apart in time. Every result is checked.
"""
# ranks: 4
import os

import torch
import torch.distributed as dist

STEPS = 120


def main():
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    assert world == 4, "this script is written for 4 ranks"
    dist.init_process_group("gloo")
    # every rank creates every group, in the same order
    g01 = dist.new_group([0, 1])
    g23 = dist.new_group([2, 3])
    g02 = dist.new_group([0, 2])
    g13 = dist.new_group([1, 3])
    gall = dist.new_group([0, 1, 2, 3])
    pair = g01 if rank in (0, 1) else g23
    pair_ranks = [0, 1] if rank in (0, 1) else [2, 3]
    cross = g02 if rank in (0, 2) else g13
    cross_ranks = [0, 2] if rank in (0, 2) else [1, 3]

    for i in range(STEPS):
        # a few calls on the pair group (tensor-parallel-like)
        for j in range(3):
            t = torch.tensor([float(rank * 10 + i + j)])
            dist.all_reduce(t, group=pair)
            if t.item() != float(sum(r * 10 + i + j for r in pair_ranks)):
                raise RuntimeError(f"step {i}.{j}: pair all_reduce {t.item()}")
        # broadcast in the cross group (data-parallel-like), root = its first rank
        b = torch.tensor([float(rank + i)])
        dist.broadcast(b, src=cross_ranks[0], group=cross)
        if b.item() != float(cross_ranks[0] + i):
            raise RuntimeError(f"step {i}: cross broadcast {b.item()}")
        # a gather over the whole world through the explicit group, then the default one
        out = [torch.zeros(1) for _ in range(world)]
        dist.all_gather(out, torch.tensor([float(rank * i)]), group=gall)
        if [o.item() for o in out] != [float(r * i) for r in range(world)]:
            raise RuntimeError(f"step {i}: world all_gather {[o.item() for o in out]}")
        if i % 10 == 0:
            dist.barrier()
    print(f"rank {rank}: {STEPS} steps over 5 groups ok")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
