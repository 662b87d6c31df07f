# case: reduce_dst_grouprank
# label: silent
# world: 4
# culprits: 1, 2, 3
# cause: dist.reduce(grad, dst=AGG, group=workers), line 26
"""Workers 1-3 sum their gradients onto an aggregator, "group member 1" (the
middle worker, global rank 2).  AGG = 1 is a rank WITHIN ``workers`` but is
passed as ``dst``, which torch reads as a GLOBAL rank: global rank 1 is a
member too, so no error is raised and the sum lands on rank 1, while the real
aggregator (rank 2) keeps a stale tensor.  Modelled on pytorch issue #141825
(DCP coordinator_rank, a group rank, used as gather_object dst,
https://github.com/pytorch/pytorch/issues/141825) and vllm PR 2528
(https://github.com/vllm-project/vllm/pull/2528)."""
import datetime
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
members = [1, 2, 3]
workers = dist.new_group(members)
AGG = 1                                   # aggregator, as a rank within workers
if rank in members:
    grad = torch.tensor([float(rank)])    # 1 + 2 + 3 = 6 expected on the aggregator
    dist.reduce(grad, dst=AGG, group=workers)
    if dist.get_rank(workers) == AGG:
        verdict = "OK" if grad.item() == 6.0 else "WRONG"
        sys.stdout.write(f"rank {rank}: aggregator sum={grad.item()} expected=6.0 {verdict}\n")
    else:
        sys.stdout.write(f"rank {rank}: contributor OK\n")
else:
    sys.stdout.write(f"rank {rank}: driver, not in group OK\n")
dist.destroy_process_group()
