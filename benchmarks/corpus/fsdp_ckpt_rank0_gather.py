# case: fsdp_ckpt_rank0_gather
# class: fsdp
# names: missing_ranks
# world: 2
# culprits: 1
# cause: get_model_state_dict, line 38
# nccl: yes
"""Trains with FSDP2, then saves a full (unsharded) checkpoint from the main process: rank 0 alone asks for the full
state dict, which all_gathers every parameter's shards, and rank 1, which went on to shut down, never joins."""
import datetime
import io

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp import fully_shard

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")
if torch.cuda.is_available():
    torch.cuda.set_device(device)  # FSDP2 builds its mesh on the current device

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2)).to(device)
fully_shard(model[0])
fully_shard(model[2])
fully_shard(model)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(2):
    x, y = torch.randn(4, 4, device=device), torch.randint(0, 2, (4,), device=device)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
if rank == 0:  # only the main process writes the checkpoint
    options = StateDictOptions(full_state_dict=True, cpu_offload=True)
    state = get_model_state_dict(model, options=options)
    torch.save(state, io.BytesIO())  # stands for torch.save(state, "model.pt")
dist.destroy_process_group()
