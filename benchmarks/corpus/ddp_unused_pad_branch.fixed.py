# case: ddp_unused_pad_branch
# fixed: find_unused_parameters=True, so DDP marks pad_gate ready with no gradient on the ranks whose batch skips it
# world: 3
# nccl: yes
"""A tagger under DDP gates padded positions through `pad_gate` only if its batch holds padding; rank 2 holds the
full-length sentences, and DDP, told to look for unused parameters, all_reduces a zero gradient for it there."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


class Tagger(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.pad_gate, self.out = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 4), torch.nn.Linear(4, 3)

    def forward(self, tokens):
        h = self.embed(tokens)
        if (tokens == 0).any():  # the batch has padding: gate the padded positions
            h = h * torch.sigmoid(self.pad_gate(h))
        return self.out(h.mean(dim=1))


torch.manual_seed(0)
lengths = torch.tensor([3, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6])  # the dataset's sentences, bucketed by length
tokens = torch.randint(1, 10, (12, 6)).masked_fill(torch.arange(6) >= lengths[:, None], 0)  # 0 pads
labels = torch.randint(0, 3, (12,))
model = DistributedDataParallel(Tagger().to(device), device_ids=[rank] if torch.cuda.is_available() else None,
                                find_unused_parameters=True)  # the forward may skip pad_gate
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    rows = slice(rank * 4 + step * 2, rank * 4 + step * 2 + 2)  # this rank's contiguous shard, 2 per batch
    loss = torch.nn.functional.cross_entropy(model(tokens[rows].to(device)), labels[rows].to(device))
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
