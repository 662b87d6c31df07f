# case: missing_rank0_eval_ddp_forward
# class: missing_ranks
# names: missing_ranks
# world: 3
# culprits: 0
# cause: ddp_model, line 40
# nccl: yes
"""Three DDP ranks train a model with BatchNorm; after the epoch rank 0 alone runs validation and
then every rank meets at a barrier. Rank 0 validates through the DDP wrapper, and DDP's forward
first broadcasts the module buffers (BatchNorm running stats) from rank 0 - a collective that
ranks 1 and 2 never make, since they went straight to the barrier, so the job hangs there.
From: https://discuss.pytorch.org/t/torch-distributed-barrier-hangs-in-ddp/114522/6
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 1))
    ddp_model = DDP(net)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for step in range(3):
        x = torch.randn(16, 8, generator=gen)
        loss = ddp_model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    if rank == 0:  # only rank 0 validates
        val_x = torch.randn(64, 8, generator=gen)
        ddp_model.eval()
        with torch.no_grad():
            val_loss = ddp_model(val_x).pow(2).mean()
        ddp_model.train()
        print(f"rank 0: validation loss {val_loss.item():.4f}")
    dist.barrier()
    print(f"rank {rank}: epoch done")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
