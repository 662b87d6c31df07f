# case: objects_gather_main_only
# fixed: every rank calls all_gather_object; only the printing is the main process'
# world: 3
# nccl: no
"""After evaluation every rank holds its own metrics; every rank calls all_gather_object to collect them and the main
process logs the result."""
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
per_rank = [None] * world
dist.all_gather_object(per_rank, metrics)
total = sum(m["samples"] for m in per_rank)
accuracy = sum(m["accuracy"] * m["samples"] for m in per_rank) / total
if is_main_process:
    print(f"eval accuracy {accuracy:.3f} over {total} samples")

dist.destroy_process_group()
