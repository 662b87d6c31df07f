# Rank 2 broadcasts the config while ranks 0 and 1 all_reduce their gradients: different collectives.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
t = torch.ones(1024)
print(f"[rank {rank}] step 0", flush=True)
if rank == 2:
    dist.broadcast(t, src=0)  # BUG: only this rank thinks the config is still being shared
else:
    dist.all_reduce(t)
print(f"[rank {rank}] done: {t[0].item()}", flush=True)
dist.destroy_process_group()
