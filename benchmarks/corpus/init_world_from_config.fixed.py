# case: init_world_from_config
# fixed: every rank takes the world size from the launcher (WORLD_SIZE)
# world: 2
# nccl: yes
"""An inference server starts one driver and its workers, and every one of them takes the world size from the
launcher."""
import datetime
import os

import torch
import torch.distributed as dist

MODEL_CONFIG = {"tensor_parallel_size": 3}  # written for a bigger machine than this launch

rank = int(os.environ["RANK"])
if rank == 0:  # the driver counts the processes the launcher started
    world_size = int(os.environ["WORLD_SIZE"])
else:  # a worker sizes the group from the model's parallel config
    world_size = int(os.environ["WORLD_SIZE"])
backend = "nccl" if torch.cuda.is_available() else "gloo"
dist.init_process_group(backend, init_method="env://", rank=rank, world_size=world_size,
                        timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

ready = torch.ones(1, device=device)
dist.all_reduce(ready)
print(f"rank {rank}: {int(ready.item())} of {world} workers ready")
dist.destroy_process_group()
