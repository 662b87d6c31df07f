# case: driver_outside_workers_barrier_w4
# label: ok
# world: 4
# culprits: none
# waiting: none
# kind: none
"""Correct twin of f1_driver_outside_workers_w4.py: identical, except that every
rank takes part in a dist.barrier() on the world group after new_group and
before the driver (rank 0) finishes.  The barrier completes only after every
rank has finished connecting, so rank 0 can no longer cut anyone off.
Twin of a program modelled on https://github.com/pytorch/pytorch/issues/75512
"""
import datetime
import os

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    workers = dist.new_group([1, 2, 3])
    dist.barrier()  # every rank, incl. the driver: all pairs connected
    if rank == 0:
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
