# case: groups_bcast_object_src_local
# class: groups
# names: groups
# world: 4
# culprits: 2,3
# cause: dist.broadcast_object_list, line 45
# nccl: yes
"""bcast_object_src_local -- broadcast_object_list(src=0, group=tp_group) where src must be GLOBAL.

Report: https://github.com/sgl-project/sglang/pull/12762 ("Fix entry rank introduced
by #11910": broadcast_object_list(obj_list, src=0, group=self.cpu_group) changed to
src=self.tp_group.first_rank; wrong when PP > 1). Same bug class:
https://github.com/meta-pytorch/torchrec/pull/4601 (collective_utils passes a
group-local leader as the global `src`).

Mistake: layout tp=2 x pp=2, TP groups [0,1] and [2,3]. The TP leader (TP rank 0)
shares multimodal inputs with its TP peers via broadcast_object_list(src=0,
group=tp_group). torch documents `src` as a rank on the GLOBAL group regardless of
`group`; for TP group [2,3] global rank 0 is not a member.

What torchrun shows: ranks 2 and 3 raise
"ValueError: Global rank 0 is not part of group <...ProcessGroup...>"; ranks 0/1
(group [0,1], where local 0 == global 0) succeed; exit != 0.
Culprits: ranks 2 and 3 (the broadcast_object_list line). Ranks 0/1 execute the same
line but src=0 happens to be right for them.
"""
import datetime

import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank, world = dist.get_rank(), dist.get_world_size()
assert world == 4, "run with --nproc-per-node 4"

tp_groups = [dist.new_group([0, 1]), dist.new_group([2, 3])]
tp_group = tp_groups[rank // 2]
pp_stage = rank // 2

# only the TP leader has the (pretend) multimodal inputs
if dist.get_rank(tp_group) == 0:
    obj_list = [{"stage": pp_stage, "image_tokens": [pp_stage * 100 + i for i in range(4)]}]
else:
    obj_list = [None]

dist.broadcast_object_list(obj_list, src=0, group=tp_group)  # BUG: src is a global rank

expected = {"stage": pp_stage, "image_tokens": [pp_stage * 100 + i for i in range(4)]}
if obj_list[0] != expected:
    print(f"WRONG rank {rank}: got {obj_list[0]} expected {expected}", flush=True)
else:
    print(f"OK rank {rank}: {obj_list[0]}", flush=True)

dist.destroy_process_group()
