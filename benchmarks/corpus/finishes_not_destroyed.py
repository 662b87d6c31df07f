# case: finishes_not_destroyed
# class: finishes
# names: not_destroyed
# world: 2
# culprits: 0, 1
# cause: init_process_group, line 15
# nccl: yes
"""Batch inference: each rank scores its half of the prompts and rank 0 gathers the scores, and the script ends
without destroy_process_group, leaving the process group to be torn down at interpreter exit."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
scorer = torch.nn.Linear(16, 1).to(device)
prompts = torch.randn(8, 16, device=device)
with torch.no_grad():
    scores = scorer(prompts[rank::world]).squeeze(1)

gathered = [torch.empty_like(scores) for _ in range(world)] if rank == 0 else None
dist.gather(scores, gathered, dst=0)
if rank == 0:
    print("scores:", [round(s, 3) for s in torch.cat(gathered).tolist()])
