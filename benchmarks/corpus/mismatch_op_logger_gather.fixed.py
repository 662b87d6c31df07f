# case: mismatch_op_logger_gather
# fixed: every rank all_gathers the losses; only rank 0 prints them
# world: 3
# nccl: yes
"""Each step averages the loss over the ranks; every rank all_gathers the per-rank losses and rank 0, the one that
logs, prints them."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(rank)
weights = torch.randn(8, device=device)
for step in range(3):
    batch = torch.randn(16, 8, device=device)
    loss = (batch @ weights).pow(2).mean()
    per_rank = [torch.zeros_like(loss) for _ in range(world)]
    dist.all_gather(per_rank, loss)  # every rank gathers; only the logger prints
    if rank == 0:
        print(f"step {step}: losses {[round(x.item(), 3) for x in per_rank]}")
    loss = torch.stack(per_rank).mean()
    weights -= 0.01 * loss
dist.destroy_process_group()
