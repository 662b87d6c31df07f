"""The NCCL version of allreduce.py: one GPU per rank (run with `python -m sandbox.run -n 2 --gpu`)."""
import os

import torch
import torch.distributed as dist

local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
dist.init_process_group("nccl", device_id=torch.device("cuda", local))
t = torch.full((4,), float(dist.get_rank() + 1), device="cuda")
dist.all_reduce(t)
print(f"rank {dist.get_rank()} on {t.device}: {t.tolist()}")
dist.destroy_process_group()
