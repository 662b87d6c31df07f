# case: p2p_unmatched_tag
# fixed: the last stage receives with the micro-batch index as the tag, like stage 1
# world: 3
# nccl: no
"""A three-stage pipeline tags each micro-batch's activations with its index, and every stage receives with the
same tag."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(rank)
stage = torch.nn.Linear(32, 32).to(device)
num_micro_batches = 2
loss = torch.zeros(1, device=device)

with torch.no_grad():
    for mb in range(num_micro_batches):
        if rank == 0:
            activations = stage(torch.randn(4, 32, device=device))
            dist.send(activations, dst=1, tag=mb)
        elif rank == 1:
            activations = torch.empty(4, 32, device=device)
            dist.recv(activations, src=0, tag=mb)
            dist.send(stage(activations), dst=2, tag=mb)
        else:
            activations = torch.empty(4, 32, device=device)
            dist.recv(activations, src=1, tag=mb)
            loss += stage(activations).pow(2).mean() / num_micro_batches

dist.broadcast(loss, src=world - 1)
print(f"rank {rank}: loss {loss.item():.4f}")
dist.destroy_process_group()
