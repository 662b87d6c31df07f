# case: groups_eval_subset
# class: groups
# names: groups
# world: 3
# culprits: 2
# cause: new_group, line 23
# nccl: yes
"""Ranks 0 and 1 evaluate in a group of their own, but only they call new_group: new_group must be called by every
rank of the job: rank 2's next new_group, the CPU group every rank makes, is paired with the eval group, and the
job hangs."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

EVAL_RANKS = [0, 1]  # rank 2 only trains
if rank in EVAL_RANKS:
    eval_group = dist.new_group(EVAL_RANKS)  # only the evaluating ranks create their group
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
