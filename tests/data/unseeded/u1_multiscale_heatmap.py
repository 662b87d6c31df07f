"""Multi-scale data-parallel training of a tiny conv detector head.

Every step picks an input resolution from SCALES (YOLO-style multi-scale
augmentation), runs the conv head, averages gradients across ranks and also
accumulates a global mean activation heatmap (summed over all ranks) that we
dump for visualisation at the end of the run.

Launch: torchrun --nproc-per-node 3 u1_multiscale_heatmap.py
"""
import datetime
import random

import torch
import torch.distributed as dist
import torch.nn as nn

SCALES = [96, 112, 128, 144, 160, 176, 192, 208]
STEPS = 6


def main():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    head = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU(),
                         nn.Conv2d(8, 1, 3, stride=2, padding=1))
    opt = torch.optim.SGD(head.parameters(), lr=0.01)

    for step in range(STEPS):
        size = random.choice(SCALES)          # multi-scale augmentation
        x = torch.randn(4, 3, size, size)
        target = torch.rand(4, 1, size // 4, size // 4)
        out = head(x)
        loss = nn.functional.mse_loss(out, target)
        opt.zero_grad()
        loss.backward()
        for p in head.parameters():
            dist.all_reduce(p.grad)
            p.grad /= world
        opt.step()
        # global heatmap for this step: sum of per-rank mean activation maps
        heat = out.detach().mean(dim=(0, 1))   # (size/4, size/4)
        dist.all_reduce(heat)
        if rank == 0:
            print(f"step {step} size {size} loss {loss.item():.4f} "
                  f"heat max {heat.max().item():.3f}", flush=True)

    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
