# case: mismatch_op_node_config
# class: mismatch/op
# names: mismatch
# world: 3
# culprits: 2
# cause: reduce, line 30
# nccl: yes
"""Gradients are averaged with all_reduce, but the second node's config still says `sync: reduce` (left over from a
parameter-server setup), so rank 2 calls reduce while ranks 0 and 1 call all_reduce and the job hangs."""
import datetime

import torch
import torch.distributed as dist

dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo", timeout=datetime.timedelta(seconds=15))
rank, world = dist.get_rank(), dist.get_world_size()
device = torch.device("cuda", rank) if torch.cuda.is_available() else torch.device("cpu")

RANKS_PER_NODE = 2
NODE_CONFIGS = [{"sync": "all_reduce", "lr": 0.1}, {"sync": "reduce", "lr": 0.1}]  # one config file per node
cfg = NODE_CONFIGS[rank // RANKS_PER_NODE]

torch.manual_seed(0)
model = torch.nn.Linear(4, 1).to(device)
for step in range(2):
    x = torch.randn(8, 4, device=device)
    model(x).pow(2).mean().backward()
    for p in model.parameters():
        if cfg["sync"] == "reduce":
            dist.reduce(p.grad, dst=0)
        else:
            dist.all_reduce(p.grad)
        p.grad /= world
    with torch.no_grad():
        for p in model.parameters():
            p -= cfg["lr"] * p.grad
            p.grad = None
dist.destroy_process_group()
