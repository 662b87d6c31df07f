# case: mismatch_reduce_op_worst_loss
# class: mismatch/reduce_op
# names: mismatch
# world: 2
# culprits: 0
# cause: all_reduce, line 24
# nccl: yes
"""The ranks sum their losses to log the mean; rank 0, the logger, reduces with MAX to see the worst rank's loss
too. On gloo the call completes and both ranks get the max: the mean loss every rank logs is wrong."""
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
    if rank == 0:
        dist.all_reduce(loss, op=dist.ReduceOp.MAX)  # the logger wants the worst rank's loss
        print(f"step {step}: worst loss {loss.item():.3f}")
    else:
        dist.all_reduce(loss)
    print(f"rank {rank} step {step}: mean loss {loss.item() / world:.3f}")
dist.destroy_process_group()
