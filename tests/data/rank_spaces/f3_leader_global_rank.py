# case: leader_global_rank
# label: silent
# world: 4
# culprits: 2
# cause: is_leader = dist.get_rank() == 0, line 25
"""Two pairs [0, 1] and [2, 3] (think: one group per node).  In each pair the
leader (group rank 0) loads a scale and shares it by all_reduce(SUM) while the
other member contributes 0.  The leader test uses the GLOBAL rank
``dist.get_rank() == 0`` instead of ``dist.get_rank(pair) == 0``: pair [0, 1]
is fine, but in pair [2, 3] nobody thinks it is the leader, rank 2 contributes
0 instead of its scale and both members silently end with 0.  Modelled on
pytorch issue #130515 (group rank compared with a global src, zero gradients on
subgroups, https://github.com/pytorch/pytorch/issues/130515) and torchrec
PR 4601 (https://github.com/meta-pytorch/torchrec/pull/4601)."""
import datetime
import sys
import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = dist.get_rank()
pairs = [dist.new_group([0, 1]), dist.new_group([2, 3])]
pair = pairs[rank // 2]
leader = dist.get_global_rank(pair, 0)
is_leader = dist.get_rank() == 0
scale = torch.tensor([10.0 + rank]) if is_leader else torch.zeros(1)
dist.all_reduce(scale, group=pair)        # leader's scale reaches its pair
expected = 10.0 + leader
verdict = "OK" if scale.item() == expected else "WRONG"
sys.stdout.write(f"rank {rank}: scale={scale.item()} expected={expected} {verdict}\n")
dist.destroy_process_group()
