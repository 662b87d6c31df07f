"""Collectives issued in set-iteration order (2 ranks; process-level difference).

The metrics to average are kept in a set of names and all_reduced one by one in
iteration order. String hashing is seeded per interpreter (PYTHONHASHSEED), so
each rank can iterate the set in a different order and the all_reduces are
cross-paired: https://github.com/NVIDIA/apex/issues/19 (collectives in dict order,
fixed in https://github.com/NVIDIA/apex/pull/18) and
https://github.com/NVIDIA/nvalchemi-toolkit/pull/143 ("iteration order is
randomized per process (Python string-hash seed) ... each rank issued those
collectives in a different order").

This pair is triggered by the per-rank string-hash seed, not by a delay: PASSES
when both ranks' hash seeds give the same order of {"loss", "accuracy", "grad_norm"}
(e.g. PYTHONHASHSEED equal on both ranks), FAILS when they differ (e.g.
PYTHONHASHSEED=1 on rank 0 and 3 on rank 1; plain torchrun leaves it random, so
most plain runs fail, 13 of 16 here): the sums are mixed up and the assert fires.
"""

import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
local = {"loss": 1.0 + rank, "accuracy": 10.0 + rank, "grad_norm": 100.0 + rank}
names = {"loss", "accuracy", "grad_norm"}
avg = {}
for name in names:  # BUG: set order depends on the per-process hash seed
    t = torch.tensor([local[name]])
    dist.all_reduce(t)
    avg[name] = t.item() / 2
assert avg == {"loss": 1.5, "accuracy": 10.5, "grad_norm": 100.5}, avg
dist.destroy_process_group()
