# case: objects_gather_main_only
# class: objects
# names: missing_ranks
# world: 3
# culprits: 1, 2
# cause: all_gather_object, line 28
# nccl: no
"""After evaluation every rank holds its own metrics, and only the main process, which does the logging, calls
all_gather_object to collect them: the other ranks never join it."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(rank)
logits = torch.randn(100, 10, device=device)
labels = torch.randint(0, 10, (100,), device=device)
metrics = {"rank": rank, "samples": len(labels),
           "accuracy": (logits.argmax(dim=1) == labels).float().mean().item()}

is_main_process = rank == 0
if is_main_process:
    per_rank = [None] * world
    dist.all_gather_object(per_rank, metrics)
    total = sum(m["samples"] for m in per_rank)
    accuracy = sum(m["accuracy"] * m["samples"] for m in per_rank) / total
    print(f"eval accuracy {accuracy:.3f} over {total} samples")

dist.destroy_process_group()
