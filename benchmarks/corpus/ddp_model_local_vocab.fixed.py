# case: ddp_model_local_vocab
# fixed: the vocabulary size is the largest token id over every shard (all_reduce MAX): the same model on every rank
# world: 3
# nccl: yes
"""A next-token model under DDP sizes its vocabulary from the largest token id over every rank's shard (one
all_reduce with MAX), so every rank builds the same embedding and output layer."""
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
largest = tokens.max().reshape(1)
dist.all_reduce(largest, op=dist.ReduceOp.MAX)  # the largest id any rank has seen
vocab_size = int(largest) + 1
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
