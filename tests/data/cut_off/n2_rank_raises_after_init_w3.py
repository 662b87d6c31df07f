# case: rank_raises_after_init_w3
# label: negative
# world: 3
# culprits: 1
# waiting: 0,2
# kind: error
"""NEGATIVE (not "left early"): rank 1 raises its own exception.  World 3.  After
init and a world barrier (all connections established), rank 1 fails to parse
its config and raises ValueError; ranks 0 and 2 wait in the world all_reduce
that rank 1 never reaches (torchrun then tears them down).
Modelled on generic "one rank crashed, others hang in the next collective"
reports, e.g. https://github.com/pytorch/pytorch/issues/57469 (gloo errors
seen on the surviving ranks).
"""
import datetime
import os

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    dist.barrier()
    cfg = {0: "0.1", 1: "lr=oops", 2: "0.1"}[rank]
    lr = float(cfg)  # rank 1: ValueError
    t = torch.full((4,), lr)
    dist.all_reduce(t)
    print(f"rank {rank}: all_reduce={t[0].item():.2f} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
