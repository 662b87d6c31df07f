# case: ddp_model_rank0_head
# fixed: every rank appends the classifier head; only the checkpoint read stays on rank 0
# world: 2
# nccl: yes
"""Fine-tunes a pretrained encoder under DDP: only rank 0 loads the checkpoint (DDP's constructor copies rank 0's
weights to the others), and every rank appends the new classifier head, so every rank builds the same model."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

checkpoint = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).state_dict()  # torch.load("encoder.pt")
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU())
if rank == 0:  # one read of the checkpoint is enough: DDP broadcasts rank 0's weights
    model.load_state_dict(checkpoint)
model.append(torch.nn.Linear(8, 3))  # the new task's classifier head
model = DistributedDataParallel(model.to(device), device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x, y = torch.randn(4, 4, device=device), torch.randint(0, 3, (4,), device=device)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
