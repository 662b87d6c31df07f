"""Groups created in a different order on different ranks (new_group's docstring:
"groups should be created in the same order in all processes"; reports of
new_group hanging or crashing when each rank builds the groups it belongs to
first). Here every rank sorts the group specs "mine first", so the creation
order depends on the rank: ranks 0, 1, 3 create pair then trio, rank 2 creates
trio then pair. A data-loader rank (3), in no group, creates both in the common
order and exits early.
"""
# world: 4
# kind: group_mismatch
# culprits: 2
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
T = datetime.timedelta(seconds=10)
SPECS = {"pair": [0, 1], "trio": [0, 1, 2]}

# bug: "create my own groups first" makes the order rank-dependent
order = sorted(SPECS, key=lambda n: (rank not in SPECS[n], n))
groups = {n: dist.new_group(SPECS[n], timeout=T) for n in order}

if rank == 3:  # data loader: in no group, nothing more to do
    time.sleep(1)
    dist.destroy_process_group()
    print("OK")
    raise SystemExit(0)

x = torch.ones(4)
dist.all_reduce(x, group=groups["trio"])
assert x[0].item() == 3.0, x
if rank in SPECS["pair"]:
    dist.all_reduce(x, group=groups["pair"])
dist.destroy_process_group()
print("OK")
