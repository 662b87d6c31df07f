# case: mismatch_op_logger_gather
# class: mismatch/op
# names: mismatch
# world: 3
# culprits: 0
# cause: all_gather, line 26
# nccl: yes
"""Each step averages the loss over the ranks; rank 0, the one that logs, all_gathers every rank's loss to print
them while the others all_reduce it, so the ranks meet at different collectives and hang."""
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
    if rank == 0:
        per_rank = [torch.zeros_like(loss) for _ in range(world)]
        dist.all_gather(per_rank, loss)  # the logger wants each rank's loss, not just the mean
        print(f"step {step}: losses {[round(x.item(), 3) for x in per_rank]}")
        loss = torch.stack(per_rank).mean()
    else:
        dist.all_reduce(loss)
        loss /= world
    weights -= 0.01 * loss
dist.destroy_process_group()
