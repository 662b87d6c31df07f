# case: mismatch_op_empty_shard
# class: mismatch/op
# names: mismatch
# world: 4
# culprits: 3
# cause: barrier, line 33
# nccl: yes
"""Evaluation splits 9 samples over 4 ranks in chunks of 3; rank 3's chunk is empty, so it skips the all_reduce of
the correct count and goes straight to the final barrier, which meets the other ranks' all_reduce and hangs."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
features, labels = torch.randn(9, 4), torch.randint(0, 2, (9,))
model = torch.nn.Linear(4, 2).to(device)
chunk = -(-len(labels) // world)  # ceil(9 / 4) = 3: chunks of 3, 3, 3 and 0
mine = slice(rank * chunk, (rank + 1) * chunk)

correct = torch.zeros(2, device=device)  # [correct, seen]
if len(labels[mine]) > 0:
    with torch.no_grad():
        preds = model(features[mine].to(device)).argmax(1)
    correct[0] = (preds == labels[mine].to(device)).sum()
    correct[1] = len(labels[mine])
    dist.all_reduce(correct)  # an empty chunk has nothing to add, so it skips this
    print(f"rank {rank}: accuracy {correct[0].item() / correct[1].item():.2f}")
dist.barrier()
dist.destroy_process_group()
