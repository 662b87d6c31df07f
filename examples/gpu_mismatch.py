"""mismatch.py on GPUs: rank 1 broadcasts while the others all_reduce (run with `sandbox.run -n 2 --gpu`)."""
import os

import torch
import torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
t = torch.ones(4, device="cuda")
if dist.get_rank() == 1:
    dist.broadcast(t, src=0)  # BUG: the odd one out
else:
    dist.all_reduce(t)
print(t.tolist())
