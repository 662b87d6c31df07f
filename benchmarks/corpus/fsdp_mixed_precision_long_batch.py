# case: fsdp_mixed_precision_long_batch
# class: fsdp
# names: mismatch
# world: 3
# culprits: 2
# cause: model, line 34
# nccl: yes
"""Trains a small sequence model with FSDP2 and picks bf16 parameters when the batches are long, to save memory, but
each rank looks at its own batches: rank 2 holds the long sentences and all_gathers its shards in bf16 while ranks 0
and 1 all_gather theirs in float32, so the first all_gather of the forward does not match."""
import datetime

import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
if torch.cuda.is_available():
    torch.cuda.set_device(device)  # FSDP2 builds its mesh on the current device

torch.manual_seed(0)
lengths = [5, 6, 6, 7, 7, 8, 11, 12, 12]  # the dataset's sentences, bucketed by length: three to a rank
longest = max(lengths[rank * 3:rank * 3 + 3])  # the longest sentence this rank will see
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if longest > 10 else torch.float32)
model = torch.nn.Sequential(torch.nn.Embedding(16, 8), torch.nn.Linear(8, 16)).to(device)
for layer in model:
    fully_shard(layer, mp_policy=mp)
fully_shard(model, mp_policy=mp)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for i in range(rank * 3, rank * 3 + 2):
    tokens = torch.randint(0, 16, (1, lengths[i]), device=device)
    logits = model(tokens[:, :-1]).float()
    loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), tokens[:, 1:].flatten())
    opt.zero_grad()
    loss.backward()
    opt.step()
dist.destroy_process_group()
