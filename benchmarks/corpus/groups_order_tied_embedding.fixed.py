# case: groups_order_tied_embedding
# fixed: every stage creates the two groups in the same order
# world: 3
# nccl: yes
"""A 3-stage pipeline needs two groups: the first and last stage share the tied embedding, the last two stages hand
off activations. Every stage creates them in the same order, as new_group requires."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

FIRST, LAST = 0, world - 1
TIED, HANDOFF = [FIRST, LAST], [LAST - 1, LAST]
tied_group = dist.new_group(TIED)
handoff_group = dist.new_group(HANDOFF)

torch.manual_seed(rank)
embedding_grad = torch.randn(4, device=device)
if rank in TIED:  # the two copies of the tied embedding get the sum of both gradients
    dist.all_reduce(embedding_grad, group=tied_group)
    print(f"rank {rank}: tied embedding grad {[round(g, 3) for g in embedding_grad.tolist()]}")
dist.destroy_process_group()
