# case: groups_eval_subset
# fixed: every rank calls new_group(EVAL_RANKS), members or not
# world: 3
# nccl: yes
"""Ranks 0 and 1 evaluate in a group of their own; every rank of the job calls new_group for it, as new_group
requires, and only the members use it."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

EVAL_RANKS = [0, 1]  # rank 2 only trains
eval_group = dist.new_group(EVAL_RANKS)  # every rank creates it, members or not
cpu_group = dist.new_group(backend="gloo")  # every rank: for exchanging metadata on the CPU

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
val_x = torch.randn(4, 4, device=device)
if rank in EVAL_RANKS:
    with torch.no_grad():
        score = model(val_x[rank::2]).pow(2).mean()
    dist.all_reduce(score, group=eval_group)
    print(f"rank {rank}: validation score {score.item() / len(EVAL_RANKS):.4f}")
done = torch.ones(1)
dist.all_reduce(done, group=cpu_group)
dist.destroy_process_group()
