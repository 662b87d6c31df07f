# case: ok2_bcast_object_src_grouprank
# label: ok
# world: 3
# culprits: none
# cause: none
"""Correct twin of f4_bcast_object_src_grouprank (fixed call on line 23): the
leader is a rank WITHIN the group and is now passed as ``group_src``, so global rank 1 (group rank 0)
builds the plan and both members receive it.  This is the fix merged in
torchrec PR 4601 (https://github.com/meta-pytorch/torchrec/pull/4601)."""
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
    dist.broadcast_object_list(objs, group_src=LEADER, group=shard_group)
    plan = objs[0]
    ok = plan is not None and plan["owner"] == members[LEADER]
    sys.stdout.write(f"rank {rank}: plan={plan} {'OK' if ok else 'WRONG'}\n")
else:
    sys.stdout.write(f"rank {rank}: not in shard group OK\n")
dist.destroy_process_group()
