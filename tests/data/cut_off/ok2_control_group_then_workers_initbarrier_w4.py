# case: control_group_then_workers_initbarrier_w4
# label: ok
# world: 4
# culprits: none
# waiting: none
# kind: none
"""Correct twin of f4_control_group_then_workers_w4.py: identical, except that
TORCH_DIST_INIT_BARRIER=1 is set via os.environ before init_process_group.
torch then runs a store-based barrier over all ranks at the end of
init_process_group and of each new_group (non-members included), so rank 3
cannot return from its last new_group before every rank has connected.
Twin of a program modelled on https://github.com/pytorch/pytorch/issues/75512
"""
import datetime
import os

import torch
import torch.distributed as dist

RESUME = False


def main():
    os.environ["TORCH_DIST_INIT_BARRIER"] = "1"
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
