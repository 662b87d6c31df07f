# case: control_group_then_workers_w4
# label: faulty
# world: 4
# culprits: 3
# waiting: 0,1,2
# kind: left_early
"""World 4, the others wait in a SECOND new_group.  Rank 3 is a driver.  All
ranks first create a control group [0, 3] (driver <-> leader, used only when
resuming from a checkpoint; not resuming here, so neither rank 0 nor rank 3
uses it), then the worker group [0, 1, 2] (rank 3 not a member).  Rank 3 then
exits.  Workers all_reduce in [0, 1, 2].

Fault: no barrier after init/new_group, so rank 3 may close its pairs while
rank 0 is still connecting to it inside init_process_group or inside
new_group([0, 3]) -> rank 0 fails with "Gloo connectFullMesh failed ...
Connection closed by peer"; ranks 1 and 2 then wait for rank 0 in the second
new_group([0, 1, 2]) (or its all_reduce).  Rank 3 made every call it had to.
Modelled on gloo 'Connection closed by peer' failures at init/new_group:
https://github.com/pytorch/pytorch/issues/75512 ,
https://github.com/pytorch/pytorch/issues/57469 ,
https://github.com/pytorch/pytorch/issues/53270
"""
import datetime
import os

import torch
import torch.distributed as dist

RESUME = False


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    control = dist.new_group([0, 3])
    workers = dist.new_group([0, 1, 2])
    if RESUME and rank in (0, 3):
        step = torch.zeros(1)
        dist.broadcast(step, src=3, group=control)
    if rank == 3:
        print(f"rank {rank}: driver done OK", flush=True)
        dist.destroy_process_group()
        return
    t = torch.ones(4)
    dist.all_reduce(t, group=workers)
    assert t[0].item() == 3.0, t
    print(f"rank {rank}: workers all_reduce={t[0].item()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
