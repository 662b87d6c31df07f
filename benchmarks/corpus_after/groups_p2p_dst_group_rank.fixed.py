# case: groups_p2p_dst_group_rank
# fixed: use group_dst=/group_src= (ranks inside pp_group) instead of dst=/src= (global ranks)
# world: 4
# nccl: yes
"""p2p_dst_group_rank.fixed -- correct twin of p2p_dst_group_rank.py.

Report: https://github.com/pytorch/pytorch/issues/91760
Fix (minimal): use group_dst=/group_src= (ranks inside pp_group) instead of dst=/src= (global ranks).
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
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
    dist.send(act, group_dst=1, group=pp_group)  # FIX: rank inside pp_group
else:
    dist.recv(act, group_src=0, group=pp_group)  # FIX: rank inside pp_group
    peer = rank - 2
    expected = torch.arange(4, dtype=torch.float32) + 10 * peer
    if not torch.equal(act, expected):
        print(f"WRONG rank {rank}: activation {act.tolist()} expected {expected.tolist()}", flush=True)
    else:
        print(f"OK rank {rank}: activation from rank {peer}", flush=True)

dist.destroy_process_group()
