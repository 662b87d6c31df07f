"""Correct twin of 13_set_order_collectives_broken.py (2 ranks).

The metric names are iterated in sorted order, which is the same in every
interpreter whatever its hash seed, so the all_reduces pair up correctly.
"""

import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
local = {"loss": 1.0 + rank, "accuracy": 10.0 + rank, "grad_norm": 100.0 + rank}
names = {"loss", "accuracy", "grad_norm"}
avg = {}
for name in sorted(names):  # FIX: rank-independent order
    t = torch.tensor([local[name]])
    dist.all_reduce(t)
    avg[name] = t.item() / 2
assert avg == {"loss": 1.5, "accuracy": 10.5, "grad_norm": 100.5}, avg
dist.destroy_process_group()
