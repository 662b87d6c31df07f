# case: missing_rank0_forward_hook
# class: missing_ranks
# names: missing_ranks
# world: 2
# culprits: 0
# cause: dist.all_reduce, line 24
# nccl: yes
"""Two DDP ranks train a small MLP; an activation-norm logger is attached as a forward hook,
and since only rank 0 writes logs the hook is registered on rank 0 only. The hook all-reduces
the activation norm to log a global value, so on every forward rank 0 makes an all_reduce that
rank 1 never makes, and it gets paired with rank 1's DDP gradient all-reduce.
From: https://github.com/mosaicml/composer/issues/239
"""
import datetime

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


def log_activation_norm(module, inputs, output):
    norm = output.detach().norm().reshape(1)
    dist.all_reduce(norm)
    print(f"activation norm (sum over ranks): {norm.item():.3f}")


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    if rank == 0:  # rank 0 is the logging rank
        net[0].register_forward_hook(log_activation_norm)
    ddp_model = DDP(net)
    opt = torch.optim.SGD(ddp_model.parameters(), lr=0.01)
    gen = torch.Generator().manual_seed(rank)
    for step in range(4):
        x = torch.randn(16, 8, generator=gen)
        loss = ddp_model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(f"rank {rank}: finished")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
