"""A correct NCCL job whose collectives overlap with compute, and one rank that is late on the CPU: the sandbox
must not call it a hang (run with `sandbox.run -n 2 --gpu`)."""
import os
import time

import torch
import torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
x, w = torch.randn(2048, 2048, device="cuda"), torch.randn(2048, 2048, device="cuda") / 64
for step in range(30):
    dist.all_reduce(x)  # returns once enqueued; the GPU runs it while Python goes on
    x = torch.tanh(x @ w)
if dist.get_rank() == 1:
    time.sleep(3)  # late on the CPU: rank 0's next collective waits in flight, not a deadlock
dist.all_reduce(x)
print(f"rank {dist.get_rank()}: {x.norm().item():.3f}")
dist.destroy_process_group()
