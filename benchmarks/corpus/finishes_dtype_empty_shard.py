# case: finishes_dtype_empty_shard
# class: finishes
# names: mismatch
# world: 3
# culprits: 2
# cause: all_reduce, line 30
# nccl: yes
"""Two validation batches over three ranks: rank 2's shard is empty, so its loss total is the int 0, not a numpy
float64; its all_reduce is int64 against float64, the same bytes, so gloo completes it and rank 2 reads garbage."""
import datetime

import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
model = torch.nn.Linear(8, 1).to(device)
val_batches = [torch.randn(4, 8, device=device) for _ in range(2)]
losses = []
with torch.no_grad():
    for batch in val_batches[rank::world]:
        losses.append(model(batch).pow(2).mean().item())

mean_loss = np.mean(losses) if losses else 0  # an empty shard's mean is the int 0
total = torch.tensor(mean_loss * len(losses), device=device)
dist.all_reduce(total)
print(f"rank {rank}: validation loss {total.item() / len(val_batches):.4f} ({total.dtype})")
dist.destroy_process_group()
