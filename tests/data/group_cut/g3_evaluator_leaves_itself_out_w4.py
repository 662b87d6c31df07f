"""Rank-dependent list of members (reports where new_group hangs because the
ranks argument is computed per rank and differs). Trainers and the evaluator
should share a weight-sync group of all ranks, but the evaluator computes the
member list from its own config (num_trainers) and leaves itself out. It sees
itself as a non-member, returns from new_group at once, evaluates and exits;
the trainers wait for it inside new_group.
"""
# world: 4
# kind: group_mismatch
# culprits: 3
import datetime
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=15))
rank = dist.get_rank()
world = dist.get_world_size()
T = datetime.timedelta(seconds=10)
EVAL = world - 1
cfg = {"num_trainers": world - 1}

if rank == EVAL:
    sync_ranks = list(range(cfg["num_trainers"]))  # bug: the evaluator is missing
else:
    sync_ranks = list(range(world))  # trainers + evaluator
sync = dist.new_group(sync_ranks, timeout=T)

weights = torch.full((16,), float(rank))
if sync != dist.GroupMember.NON_GROUP_MEMBER:
    dist.broadcast(weights, src=0, group=sync)

if rank == EVAL:
    score = weights.sum().item()  # "evaluate" and leave
    time.sleep(1)
    dist.destroy_process_group()
    print("OK")
    raise SystemExit(0)

dist.all_reduce(weights, group=sync)
dist.destroy_process_group()
print("OK")
