# case: missing_rank0_forward_hook
# fixed: register the hook on every rank (its all_reduce is collective) and print only on rank 0
# world: 2
# nccl: yes
"""Two DDP ranks train a small MLP with an activation-norm logger attached as a forward hook.
The hook all-reduces the activation norm, so it is registered on every rank and only its
printing is limited to rank 0; both ranks make the same all_reduce on every forward.
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
    if dist.get_rank() == 0:  # rank 0 is the logging rank
        print(f"activation norm (sum over ranks): {norm.item():.3f}")


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank = dist.get_rank()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
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
