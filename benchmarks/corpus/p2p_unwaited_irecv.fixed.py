# case: p2p_unwaited_irecv
# fixed: wait on the irecv before the forward reads its buffer
# world: 2
# nccl: no
"""Stage 1 of a pipeline posts an irecv for its input activations and waits on the request before its forward reads
the buffer."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
first, second = torch.nn.Linear(256, 256).to(device), torch.nn.Linear(256, 1).to(device)
batch = torch.randn(64, 256, device=device)

with torch.no_grad():
    if rank == 0:
        hidden = batch
        for _ in range(20):  # stage 0's share of the forward
            hidden = torch.tanh(first(hidden))
        dist.send(hidden, dst=1)
    else:
        activations = torch.zeros(64, 256, device=device)
        pending = dist.irecv(activations, src=0)
        pending.wait()
        loss = second(activations).pow(2).mean()
        print(f"rank 1: loss {loss.item():.6f}")

dist.destroy_process_group()
