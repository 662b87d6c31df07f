# Rank 1 skips step 2 (an empty batch) with an early `continue`, so it makes one all_reduce fewer;
# it reaches the final barrier while ranks 0 and 2 wait in their last all_reduce.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
for step in range(4):
    batch = [] if (rank == 1 and step == 2) else [1.0, 2.0]
    if not batch:
        continue  # BUG: skips this step's gradient all_reduce on rank 1 only
    grad = torch.tensor(batch) * (rank + 1)
    dist.all_reduce(grad)
    print(f"[rank {rank}] step {step} grad {grad.tolist()}", flush=True)
dist.barrier()
print(f"[rank {rank}] finished", flush=True)
dist.destroy_process_group()
