# case: driver_outside_worker_group_w4
# label: faulty
# world: 4
# culprits: 0
# waiting: 1,2,3
# kind: left_early
"""Rank 0 is a "driver" that is not a member of the worker group [1, 2, 3].

Every rank calls init_process_group and new_group([1, 2, 3]) (as required for
new_group with the default use_local_synchronization=False).  Rank 0 has no
further work: it prints OK, destroys the process group and exits.  Ranks 1..3
then all_reduce inside the worker group.

Fault: gloo's init_process_group/new_group return on a rank as soon as *its*
own TCP pairs are connected; no barrier follows (TORCH_DIST_INIT_BARRIER is
unset).  If rank 0 leaves while a slower rank (typically rank 1..3 under CPU
load) is still inside connectFullMesh talking to rank 0, that rank fails in
init_process_group with "Gloo connectFullMesh failed ... Connection closed by
peer", and the remaining workers then wait for it in new_group([1,2,3]) or in
the worker all_reduce.  Rank 0 made every call it had to make: it left early,
it is not "missing".

Modelled on: https://github.com/pytorch/pytorch/issues/75512 (gloo
"Connection closed by peer" at init/new_group) and the vLLM/flashinfer
"driver rank not in the worker group" pattern, e.g.
https://github.com/pytorch/pytorch/issues/57469
"""
import datetime

import torch
import torch.distributed as dist


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    workers = dist.new_group([1, 2, 3])
    if rank == 0:
        # driver: nothing else to do in this program
        print(f"rank {rank}: driver done OK", flush=True)
        dist.destroy_process_group()
        return
    t = torch.ones(4) * rank
    dist.all_reduce(t, group=workers)
    assert t[0].item() == 6.0, t
    print(f"rank {rank}: worker all_reduce={t[0].item()} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
