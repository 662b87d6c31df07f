# case: groups_bcast_object_src_local
# fixed: pass the TP leader's GLOBAL rank as src (dist.get_global_rank(tp_group, 0)), as the sglang fix does with tp_group.first_rank
# world: 4
# nccl: yes
"""bcast_object_src_local.fixed -- correct twin of bcast_object_src_local.py.

Report: https://github.com/sgl-project/sglang/pull/12762
Fix (minimal): pass the TP leader's GLOBAL rank as src (dist.get_global_rank(tp_group, 0)), as the sglang fix does with tp_group.first_rank.
What torchrun shows: every rank prints OK, no WRONG line, exit 0.
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

dist.broadcast_object_list(obj_list, src=dist.get_global_rank(tp_group, 0), group=tp_group)  # FIX

expected = {"stage": pp_stage, "image_tokens": [pp_stage * 100 + i for i in range(4)]}
if obj_list[0] != expected:
    print(f"WRONG rank {rank}: got {obj_list[0]} expected {expected}", flush=True)
else:
    print(f"OK rank {rank}: {obj_list[0]}", flush=True)

dist.destroy_process_group()
