# case: bcast_src_overconverted
# label: silent
# world: 3
# culprits: 1, 2
# cause: dist.broadcast(weights, src=owner, group=replicas), line 27
"""Replica group [1, 2] (global rank 0 is a trainer outside it).  Global rank 2
owns the fresh weights and broadcasts them to the other replica.  The author
believed ``src`` is group-relative and converted it with
``dist.get_group_rank(replicas, 2)`` == 1; but ``src`` IS a global rank, and
global rank 1 is also a member, so rank 1's stale weights silently win.
Modelled on the review in vllm-project/vime PR 340 that asked for group ranks
in dist.broadcast(src=...) (https://github.com/vllm-project/vime/pull/340) and
pytorch issue #91760 (https://github.com/pytorch/pytorch/issues/91760)."""
import datetime
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
members = [1, 2]
replicas = dist.new_group(members)
OWNER = 2                                        # global rank with fresh weights
if rank in members:
    owner = dist.get_group_rank(replicas, OWNER)  # 1: a rank within replicas
    weights = torch.full((3,), 7.0 if rank == OWNER else -1.0)
    dist.broadcast(weights, src=owner, group=replicas)
    verdict = "OK" if bool((weights == 7.0).all()) else "WRONG"
    sys.stdout.write(f"rank {rank}: weights={weights.tolist()} {verdict}\n")
else:
    sys.stdout.write(f"rank {rank}: trainer, not in group OK\n")
dist.destroy_process_group()
