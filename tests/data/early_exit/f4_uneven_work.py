# case: uneven_work
# world: 3
# culprits: 0,1
# waiting: 2
# call: init_process_group
"""Uneven local work: ranks 0 and 1 have a tiny shard, rank 2 a big one.

No collective after init; ranks 0 and 1 finish their shard almost at once
and destroy, while rank 2 (the one with the most to do) may still be
connecting in init_process_group. Modelled on the ProcessGroupGloo
flaky-test analysis in https://github.com/pytorch/pytorch/pull/61396
("some ranks may create the PG, run all the error checking ... and then
exit, all before other ranks have created the gloo pg").
"""
import datetime

import torch
import torch.distributed as dist

def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=30))
    rank = dist.get_rank()
    n = 4 if rank < 2 else 400
    acc = 0.0
    for i in range(n):
        acc += float(torch.randn(64, 64).mm(torch.randn(64, 64)).abs().mean())
    print(f"rank {rank}: {n} items, mean {acc / n:.3f} OK", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
