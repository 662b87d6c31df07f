# case: ok1_bcast_groupsrc_global
# label: ok
# world: 4
# culprits: none
# cause: none
"""Correct twin of f1_bcast_groupsrc_global (fixed call on line 23): the
leader is still looked up as a GLOBAL rank and is now passed as ``src``
(global) instead of ``group_src``, so rank 1's config reaches every worker.  Fix direction as in
vllm-omni PR 6264 / flashinfer PR 3418
(https://github.com/flashinfer-ai/flashinfer/pull/3418)."""
import datetime
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
members = [1, 2, 3]
workers = dist.new_group(members)
if rank in members:
    leader = dist.get_process_group_ranks(workers)[0]   # global rank 1
    cfg = torch.tensor([100.0 + rank])                 # each worker's own version
    dist.broadcast(cfg, src=leader, group=workers)
    expected = 100.0 + leader
    verdict = "OK" if cfg.item() == expected else "WRONG"
    sys.stdout.write(f"rank {rank}: cfg={cfg.item()} expected={expected} {verdict}\n")
else:
    sys.stdout.write(f"rank {rank}: driver, not in group OK\n")
dist.destroy_process_group()
