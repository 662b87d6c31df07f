# case: ddp_unused_warmup_freeze
# class: ddp/unused
# names: unused_parameters
# world: 3
# culprits: 2
# cause: backward, line 43
# nccl: yes
"""A small language model under DDP keeps its embeddings frozen until 8 tokens have been seen, counting this rank's
tokens only: rank 2 holds the short sentences, so its embeddings are still frozen at step 0, get no gradient there,
and its reducer never launches the gradient all_reduce that ranks 0 and 1 wait in."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")


class TinyLM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.embed, self.head = torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10)

    def forward(self, tokens):
        return self.head(self.embed(tokens))


torch.manual_seed(0)
buckets = [torch.randint(0, 10, (4, n)) for n in (6, 6, 3)]  # sentences grouped by length, one bucket per rank
tokens = buckets[rank].to(device)
model = DistributedDataParallel(TinyLM().to(device), device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
WARMUP_TOKENS, seen = 8, 0  # the head trains alone on the first tokens: the embeddings stay frozen
for step in range(2):
    batch = tokens[step * 2:step * 2 + 2]
    seen += batch.numel()  # the tokens this rank has seen
    model.module.embed.requires_grad_(seen > WARMUP_TOKENS)
    loss = torch.nn.functional.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
