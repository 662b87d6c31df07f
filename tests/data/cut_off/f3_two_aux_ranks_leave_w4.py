# case: two_aux_ranks_leave_w4
# label: faulty
# world: 4
# culprits: 2,3
# waiting: 0,1
# kind: left_early
"""World 4 with TWO early finishers.  Ranks 0 and 1 are the trainer group
[0, 1]; rank 2 is a "logger" and rank 3 an "evaluator" that are not members of
it and, in this configuration, have nothing to do.  All ranks call
new_group([0, 1]); ranks 2 and 3 then print OK and exit immediately.

Fault: no barrier after init/new_group, so ranks 2/3 may close their gloo
pairs while rank 0 or 1 is still connecting to them inside
init_process_group ("Gloo connectFullMesh failed ... Connection closed by
peer"); the other trainer then waits in new_group([0, 1]) or in the trainers'
all_reduce.  Ranks 2 and 3 skipped nothing they were part of (left early).
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
    trainers = dist.new_group([0, 1])
    if rank in (2, 3):
        role = "logger" if rank == 2 else "evaluator"
        print(f"rank {rank}: {role} idle, done OK", flush=True)
        dist.destroy_process_group()
        return
    g = torch.full((16,), float(rank + 1))
    dist.all_reduce(g, group=trainers)
    assert g[0].item() == 3.0, g
    print(f"rank {rank}: grad sum={g[0].item()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
