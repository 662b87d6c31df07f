# case: groups_order_tied_embedding
# class: groups
# names: groups
# world: 3
# culprits: 2
# cause: new_group, line 24
# nccl: yes
"""A 3-stage pipeline needs two groups: the first and last stage share the tied embedding, the last two stages hand
off activations. The last stage creates its hand-off group first, the others the embedding group first; group
names come from the order of creation, so the groups are crossed and the job breaks."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

FIRST, LAST = 0, world - 1
TIED, HANDOFF = [FIRST, LAST], [LAST - 1, LAST]
if rank == LAST:
    # the last stage sets up the hand-off first: it needs it before it computes the loss
    handoff_group = dist.new_group(HANDOFF)
    tied_group = dist.new_group(TIED)
else:
    tied_group = dist.new_group(TIED)
    handoff_group = dist.new_group(HANDOFF)

torch.manual_seed(rank)
embedding_grad = torch.randn(4, device=device)
if rank in TIED:  # the two copies of the tied embedding get the sum of both gradients
    dist.all_reduce(embedding_grad, group=tied_group)
    print(f"rank {rank}: tied embedding grad {[round(g, 3) for g in embedding_grad.tolist()]}")
dist.destroy_process_group()
