# case: finishes_async_unwaited
# fixed: wait on the all_reduce before reading the norm
# world: 2
# nccl: yes
"""Gradient clipping by the global norm: each rank starts an async all_reduce of its squared gradient norm and waits
on the request before reading the tensor, so every rank clips by the same global norm."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1)).to(device)
torch.manual_seed(1 + rank)
batch = torch.randn(32, 64, device=device)
model(batch).pow(2).mean().backward()

max_norm = 0.5
grad_sq = sum(p.grad.pow(2).sum() for p in model.parameters())
pending = dist.all_reduce(grad_sq, async_op=True)
pending.wait()
global_norm = grad_sq.sqrt().item()
clip = min(1.0, max_norm / (global_norm + 1e-6))
for p in model.parameters():
    p.grad.mul_(clip)
print(f"rank {rank}: global grad norm {global_norm:.4f}, clip coefficient {clip:.4f}")
dist.destroy_process_group()
