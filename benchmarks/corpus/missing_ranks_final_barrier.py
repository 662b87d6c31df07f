# case: missing_ranks_final_barrier
# class: missing_ranks
# names: missing_ranks
# world: 3
# culprits: 1, 2
# cause: barrier, line 33
# nccl: yes
"""After training every rank should meet at a last barrier before tearing down, but the barrier is indented into
rank 0's logging block: ranks 1 and 2 never make it and leave, and rank 0 waits for them in vain."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
for step in range(3):
    loss = model(torch.randn(8, 4, device=device)).pow(2).mean()
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            dist.all_reduce(p.grad)
            p -= 0.1 * p.grad / world
            p.grad = None

if rank == 0:
    print(f"training done, last loss on rank 0: {loss.item():.4f}")
    torch.save(model.state_dict(), "/dev/null")
    dist.barrier()  # every rank waits here before tearing down
dist.destroy_process_group()
