# case: ddp_unused_aux_rank0
# class: ddp/unused
# names: unused_parameters
# world: 3
# culprits: 0
# cause: backward, line 43
# nccl: yes
"""A classifier under DDP with an auxiliary reconstruction head: the auxiliary loss is added inside the block that
logs it, on rank 0 only, so `recon` gets no gradient on ranks 1 and 2 and their reducers never launch the gradient
all_reduce that rank 0 waits in."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


class Classifier(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.body, self.head, self.recon = torch.nn.Linear(4, 8), torch.nn.Linear(8, 3), torch.nn.Linear(8, 4)

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.head(h), self.recon(h)


model = DistributedDataParallel(Classifier().to(device), device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x, y = torch.randn(4, 4, device=device), torch.randint(0, 3, (4,), device=device)
    logits, recon = model(x)
    loss = torch.nn.functional.cross_entropy(logits, y)
    if rank == 0:  # log the auxiliary loss on the main process
        recon_loss = torch.nn.functional.mse_loss(recon, x)
        print(f"step {step}: reconstruction loss {recon_loss.item():.3f}")
        loss = loss + 0.1 * recon_loss
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
