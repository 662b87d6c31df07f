"""f1: 2 ranks. Pattern: gradient all_reduce issued async (DDP-style bucket) and
overlapped with compute; a native crash (SIGABRT, e.g. a failed C++ assert in
an extension) kills one worker mid-step. Cf. DeepSpeed issue #4890
(https://github.com/deepspeedai/DeepSpeed/issues/4890, worker dies mid-training).
Culprit: rank 1 dies by SIGABRT (os.abort, line 26) at step 3 while its async
all_reduce (line 23) is in flight, not yet waited.
Faulty op: all_reduce, line 23.
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
        os.abort()
    work.wait()
    w -= 0.01 * grad / dist.get_world_size()
dist.destroy_process_group()
print(f"rank {rank} done")
