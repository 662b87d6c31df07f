# case: bcast_object_src_grouprank
# label: crash
# world: 3
# culprits: 1, 2
# cause: dist.broadcast_object_list(objs, src=LEADER, group=shard_group), line 26
"""A shard group [1, 2] (global rank 0 is outside it) lets its first member
build a sharding plan and share it.  The leader is chosen with a rank WITHIN
the group (``dist.get_rank(shard_group) == LEADER``) and the same number is then
passed as ``src``, which torch reads as a GLOBAL rank: global rank 0 is not in
the group, so both members raise ValueError.  Modelled on torchrec PR 4601
(collective_utils compares pg.rank() and broadcasts from src=rank,
https://github.com/meta-pytorch/torchrec/pull/4601)."""
import datetime
import sys
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
members = [1, 2]
shard_group = dist.new_group(members)
LEADER = 0                                 # a rank within shard_group
if rank in members:
    objs = [None]
    if dist.get_rank(shard_group) == LEADER:
        objs = [{"tables": ["t0", "t1"], "owner": rank}]
    dist.broadcast_object_list(objs, src=LEADER, group=shard_group)
    plan = objs[0]
    ok = plan is not None and plan["owner"] == members[LEADER]
    sys.stdout.write(f"rank {rank}: plan={plan} {'OK' if ok else 'WRONG'}\n")
else:
    sys.stdout.write(f"rank {rank}: not in shard group OK\n")
dist.destroy_process_group()
