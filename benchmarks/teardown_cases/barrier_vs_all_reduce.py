# Ranks 0 and 1 go to the end-of-epoch barrier; rank 2, the logging rank, first all_reduces
# its metrics, which the others never join.
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=timedelta(minutes=10))
rank = dist.get_rank()
metrics = torch.tensor([float(rank), 1.0])
if rank == dist.get_world_size() - 1:
    dist.all_reduce(metrics)  # BUG: only the logging rank reduces the metrics
    print(f"[rank {rank}] mean loss {metrics[0].item() / metrics[1].item()}", flush=True)
dist.barrier()
print(f"[rank {rank}] epoch done", flush=True)
dist.destroy_process_group()
