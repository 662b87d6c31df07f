# Rank 0 waits for rank 1's result, but rank 1 only sends when it has something to report,
# and goes straight to the barrier instead.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
result = torch.zeros(8)
if rank == 0:
    dist.recv(result, src=1)
    print(f"[rank 0] got {result.sum().item()}", flush=True)
else:
    found = []  # nothing to report this time
    if found:  # BUG: the send is conditional, the recv is not
        dist.send(torch.tensor(found), dst=0)
dist.barrier()
dist.destroy_process_group()
