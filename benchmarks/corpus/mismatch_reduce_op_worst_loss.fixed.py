# case: mismatch_reduce_op_worst_loss
# fixed: every rank makes both reductions, a MAX for the worst loss and a SUM for the mean
# world: 2
# nccl: yes
"""The ranks sum their losses to log the mean and take the MAX to log the worst rank's loss, both on every rank;
rank 0, the logger, prints the worst loss."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(rank)
for step in range(3):
    batch = torch.randn(16, 4, device=device)
    loss = batch.pow(2).mean()
    worst = loss.clone()
    dist.all_reduce(worst, op=dist.ReduceOp.MAX)  # every rank takes part; the logger prints it
    if rank == 0:
        print(f"step {step}: worst loss {worst.item():.3f}")
    dist.all_reduce(loss)
    print(f"rank {rank} step {step}: mean loss {loss.item() / world:.3f}")
dist.destroy_process_group()
