# case: local_only_rank_w3
# label: faulty
# world: 3
# culprits: 2
# waiting: 0,1
# kind: left_early
"""World 3.  Rank 2's remaining work is purely local (it computes statistics of
its own shard and prints them); it makes no distributed call after init.
Ranks 0 and 1 form a group with new_group([0, 1],
use_local_synchronization=True) -- non-members need not call it -- and
all_reduce in it.

Fault: no barrier after init, so rank 2 may finish its local work and destroy
its gloo pairs while rank 0 or 1 is still connecting to it inside
init_process_group ("Gloo connectFullMesh failed ... Connection closed by
peer"); the other rank then waits in new_group([0, 1]) or the all_reduce.
Rank 2 skipped nothing it was part of (left early).
Modelled on gloo 'Connection closed by peer' failures at init/new_group:
https://github.com/pytorch/pytorch/issues/75512 ,
https://github.com/pytorch/pytorch/issues/57469 ,
https://github.com/pytorch/pytorch/issues/53270
"""
import datetime
import os

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    if rank == 2:
        shard = torch.arange(100, dtype=torch.float32)
        print(f"rank {rank}: local stats mean={shard.mean().item()} OK", flush=True)
        dist.destroy_process_group()
        return
    pair = dist.new_group([0, 1], use_local_synchronization=True)
    t = torch.ones(4) * (rank + 1)
    dist.all_reduce(t, group=pair)
    assert t[0].item() == 3.0, t
    print(f"rank {rank}: all_reduce={t[0].item()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
