# case: groups_p2p_dst_group_rank
# class: groups
# names: groups
# world: 4
# culprits: 0,1,3
# cause: dist.send, line 44
# nccl: yes
"""p2p_dst_group_rank -- pipeline send/recv with group=pp_group and dst/src given as PP-stage numbers.

Report: https://github.com/pytorch/pytorch/issues/91760 ("Inconsistent rank among
torch.distributed primitives": ops force a global rank even when `group` is given)
and https://github.com/pytorch/pytorch/pull/140460 ("Support group_dst/group_src in
c10d send/recv": "It's annoying that 'dst' (for send) must be a global rank even
when a group is passed in"). Re-authored as a 2-stage pipeline.

Mistake: tp=2 x pp=2, stage s holds ranks {2s, 2s+1}; PP groups are [0,2] and [1,3].
Stage 0 sends its activation with send(dst=1, group=pp_group) meaning "PP rank 1",
stage 1 receives with recv(src=0, group=pp_group) meaning "PP rank 0". torch reads
dst/src as GLOBAL ranks.

What torchrun shows: rank 0 "ValueError: Global rank 1 is not part of group ...";
rank 1 "ValueError: Invalid destination rank: destination rank should not be the
same as the rank of the current process."; rank 3 "ValueError: Global rank 0 is not
part of group ..."; rank 2 (src=0 is accidentally right) waits and then fails with
gloo "Connection closed by peer"; exit != 0.
Culprits: ranks 0, 1 (send line) and 3 (recv line).
"""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"

pp_groups = [dist.new_group([0, 2]), dist.new_group([1, 3])]
pp_group = pp_groups[rank % 2]
stage = dist.get_rank(pp_group)  # 0 or 1

act = torch.zeros(4)
if stage == 0:
    act = torch.arange(4, dtype=torch.float32) + 10 * rank
    dist.send(act, dst=1, group=pp_group)  # BUG: dst is a global rank
else:
    dist.recv(act, src=0, group=pp_group)  # BUG: src is a global rank
    peer = rank - 2
    expected = torch.arange(4, dtype=torch.float32) + 10 * peer
    if not torch.equal(act, expected):
        print(f"WRONG rank {rank}: activation {act.tolist()} expected {expected.tolist()}", flush=True)
    else:
        print(f"OK rank {rank}: activation from rank {peer}", flush=True)

dist.destroy_process_group()
