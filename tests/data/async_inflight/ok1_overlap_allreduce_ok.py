"""ok1: 2 ranks. Correct twin of f1: gradient all_reduce issued async
(DDP-style bucket) and overlapped with compute; every async op is waited
before the gradient is used. Nothing dies; no culprit.
Async op: all_reduce, line 20.
"""
import datetime, os
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
torch.manual_seed(rank)
w = torch.randn(256, 256)
for step in range(6):
    x = torch.randn(64, 256)
    loss = (x @ w).pow(2).mean()
    grad = torch.autograd.functional.jacobian(lambda m: (x @ m).pow(2).mean(), w)
    grad = grad.contiguous()
    # async gradient bucket all_reduce, overlapped with the next compute
    work = dist.all_reduce(grad, async_op=True)
    _ = torch.randn(128, 128) @ torch.randn(128, 128)   # overlapped compute
    if rank == 1 and step == 3:
        pass  # (f1 aborts here)
    work.wait()
    w -= 0.01 * grad / dist.get_world_size()
dist.destroy_process_group()
print(f"rank {rank} done")
