# case: late_new_group_fixed
# world: 3
# culprits: none
# waiting: none
# call: new_group
"""Fixed twin of f6_late_new_group.py: a barrier every rank makes before destroy.

A new_group made right before the end, then destroy.

An all_reduce after init synchronizes init, but an "eval" group is created
just before shutdown and never used. new_group returns on a rank once its own
gloo pairs are made, so ranks 0 and 1 can destroy while rank 2 is still in
new_group's connectFullMesh. Modelled on
https://github.com/flashinfer-ai/flashinfer/pull/4195 and
https://github.com/flashinfer-ai/flashinfer/pull/4206 ("Gloo connectFullMesh
failed with [.../pair.cc:547] Connection closed by peer" in new_group), and
https://github.com/pytorch/pytorch/issues/11364 (flaky new_group test).
"""
import datetime

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    t = torch.ones(4) * rank
    dist.all_reduce(t)
    eval_group = dist.new_group([0, 1, 2])
    print(f"rank {rank}: sum {t[0].item()} group {eval_group is not None} OK", flush=True)
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
