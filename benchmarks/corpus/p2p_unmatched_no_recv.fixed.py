# case: p2p_unmatched_no_recv
# fixed: the trainer sends after every fourth step, (step + 1) % log_every == 0, as the logger expects
# world: 2
# nccl: no
"""The training rank sends its loss to a logging rank after every fourth step of ten (two sends), and the logger
receives both."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

steps, log_every = 10, 4
if rank == 1:  # trainer
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        loss = model(torch.randn(32, 16, device=device)).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if (step + 1) % log_every == 0:
            dist.send(loss.detach().reshape(1), dst=0)
else:  # logger
    for i in range(steps // log_every):
        logged = torch.empty(1, device=device)
        dist.recv(logged, src=1)
        print(f"logger: loss {logged.item():.4f}")

dist.barrier()
dist.destroy_process_group()
