# case: mismatch_dtype_numpy_recall
# class: mismatch/dtype
# names: mismatch
# world: 3
# culprits: 2
# cause: all_reduce, line 29
# nccl: yes
"""The ranks average the recall of the rare class 3; np.mean gives a float64, but rank 2 has no sample of class 3
and falls back to a Python 0.0, a float32 tensor, so the all_reduce gets two dtypes and gloo aborts."""
import datetime

import numpy as np
import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

RARE = 3
all_labels = [3, 1, 0, 0, 3, 2, 3, 1, 1, 2, 0, 2]
all_preds = [3, 1, 0, 2, 0, 2, 3, 1, 1, 2, 0, 1]
labels, preds = all_labels[rank::world], all_preds[rank::world]  # rank 2's labels: 0, 2, 1, 2

hits = [p == y for p, y in zip(preds, labels) if y == RARE]
# np.mean returns numpy.float64; the fallback is a Python float
recall = torch.tensor(np.mean(hits) if hits else 0.0, device=device)
seen = torch.tensor(1.0 if hits else 0.0, device=device)
dist.all_reduce(recall)
dist.all_reduce(seen)
print(f"rank {rank}: recall of class {RARE}: {(recall / seen).item():.2f}")
dist.destroy_process_group()
