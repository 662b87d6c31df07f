# case: bcast_groupsrc_global
# label: silent
# world: 4
# culprits: 1, 2, 3
# cause: dist.broadcast(cfg, group_src=leader, group=workers), line 25
"""Workers 1-3 (global rank 0 is a driver outside the group) agree on a config
by broadcasting the leader's copy.  The leader is looked up as a GLOBAL rank
(get_process_group_ranks(...)[0] == 1) but is handed to broadcast as
``group_src``, which is a rank WITHIN ``workers``: group rank 1 is global
rank 2, so rank 2's config silently overwrites everyone else's.  Modelled on
vllm-omni PR 6264 (a global rank passed as group_src) and flashinfer PR 3418
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
    dist.broadcast(cfg, group_src=leader, group=workers)
    expected = 100.0 + leader
    verdict = "OK" if cfg.item() == expected else "WRONG"
    sys.stdout.write(f"rank {rank}: cfg={cfg.item()} expected={expected} {verdict}\n")
else:
    sys.stdout.write(f"rank {rank}: driver, not in group OK\n")
dist.destroy_process_group()
