# case: local_only_fixed
# world: 2
# culprits: none
# waiting: none
# call: init_process_group
"""Fixed twin of f1_local_only.py: a barrier every rank makes before destroy.

Nothing but local work between init_process_group and destroy_process_group.

Either rank can be the one that leaves first; the other can still be inside
gloo connectFullMesh. Modelled on the flaky ProcessGroupGloo "*_checks" tests
(https://github.com/pytorch/pytorch/issues/57469,
https://github.com/pytorch/pytorch/issues/53270), which only do local checks
after creating the gloo group; the fix was a barrier
(https://github.com/pytorch/pytorch/pull/61396). No barrier after init by
default: https://github.com/pytorch/pytorch/pull/103033.
"""
import datetime

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    x = torch.arange(8, dtype=torch.float32) * (rank + 1)
    print(f"rank {rank}: local sum {float(x.sum())} OK", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
