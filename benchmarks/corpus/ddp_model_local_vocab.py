# case: ddp_model_local_vocab
# class: ddp/model
# names: model_differs
# world: 3
# culprits: 2
# cause: DistributedDataParallel, line 25
# nccl: yes
"""A next-token model under DDP sizes its vocabulary from the largest token id in this rank's shard: rank 2's shard
lacks id 49, so its embedding and output layer are one row short and DDP's constructor finds the models differ."""
import datetime

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

torch.manual_seed(1)
corpus = torch.randint(0, 50, (24, 6))  # the tokenised dataset
tokens = corpus[rank::world].to(device)  # this rank's shard
vocab_size = int(tokens.max()) + 1  # the largest id this rank has seen
model = torch.nn.Sequential(torch.nn.Embedding(vocab_size, 8), torch.nn.Linear(8, vocab_size))
model = DistributedDataParallel(model.to(device), device_ids=[rank] if torch.cuda.is_available() else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    batch = tokens[step * 4:step * 4 + 4]
    loss = torch.nn.functional.cross_entropy(model(batch[:, :-1]).flatten(0, 1), batch[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
