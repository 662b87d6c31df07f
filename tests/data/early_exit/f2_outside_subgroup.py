# case: outside_subgroup
# world: 3
# culprits: 2
# waiting: 0,1
# call: init_process_group
"""Rank 2 is outside new_group([0, 1]) and leaves right after creating it.

new_group() does not synchronize ranks (post-init barrier only with
TORCH_DIST_INIT_BARRIER=1), so rank 2 can tear down its default-group sockets
while rank 0 or 1 is still connecting to it in init_process_group.
See https://github.com/flashinfer-ai/flashinfer/pull/4195 (gloo connectFullMesh
failed ... Connection closed by peer, in new_subgroups_by_enumeration) and
https://github.com/pytorch/pytorch/issues/11364.
"""
import datetime

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    pair = dist.new_group([0, 1])
    if rank == 2:
        print(f"rank {rank}: not in subgroup, done OK", flush=True)
        dist.destroy_process_group()
        return
    t = torch.ones(4) * (rank + 1)
    dist.all_reduce(t, group=pair)
    print(f"rank {rank}: subgroup sum {t.tolist()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
