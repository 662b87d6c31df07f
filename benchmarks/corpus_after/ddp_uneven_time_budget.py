# case: ddp_uneven_time_budget
# class: ddp/uneven
# names: uneven_steps
# world: 3
# culprits: 2
# cause: loss.backward, line 46
# nccl: yes
"""Three DDP ranks train "for 3 seconds": each rank starts its clock once its shard is loaded and
leaves the loop when its own clock passes the budget. Rank 2's shard is small and loads 1.4 s
sooner, so its clock runs 1.4 s ahead of the others' although the steps themselves are in
lockstep; rank 2 stops several steps early and ranks 0 and 1 wait in DDP's gradient all-reduce.
From: https://github.com/pytorch/pytorch/issues/22834
"""
import datetime
import time

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP

BUDGET_S = 3.0
SHARD_ROWS = [150_000, 150_000, 10_000]


def load_shard(rank):
    time.sleep(SHARD_ROWS[rank] * 1e-5)  # read and decode the shard
    gen = torch.Generator().manual_seed(rank)
    return torch.randn(64, 8, generator=gen)


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    ddp_model = DDP(nn.Linear(8, 1))
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    data = load_shard(rank)
    start = time.time()
    steps = 0
    while time.time() - start < BUDGET_S:
        x = data[(steps * 8) % 64:(steps * 8) % 64 + 8]
        time.sleep(0.1)  # the rest of the step's work
        loss = ddp_model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        steps += 1
    dist.barrier()
    print(f"rank {rank}: {steps} steps in the time budget")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
