"""Rank 0 makes one all_reduce more than rank 1, then both call barrier(). On NCCL (a barrier is a one-element
all_reduce) rank 0's all_reduce #2 completes against rank 1's barrier #2, rank 1 finishes, and rank 0 waits in a
barrier nobody else enters. On gloo the two calls never pair and both ranks wait.
Run: python -m sandbox.run -n 2 examples/framework/extra_allreduce.py          (gloo)
     python -m sandbox.run -n 2 --gpu examples/framework/extra_allreduce.py    (NCCL, 2 GPUs)"""
import os

import torch
import torch.distributed as dist

if torch.cuda.is_available():  # NCCL on GPUs (a sandbox run without --gpu hides them: gloo)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
    torch.cuda.set_device(device)
    dist.init_process_group("nccl", device_id=device)
else:
    device = torch.device("cpu")
    dist.init_process_group("gloo")
rank = dist.get_rank()
t = torch.ones(4, device=device)
dist.all_reduce(t)
if rank == 0:
    dist.all_reduce(t)  # BUG: an all_reduce rank 1 does not make
dist.barrier()
print(t.tolist())
dist.destroy_process_group()
