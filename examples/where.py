"""Where each rank runs: its node's hostname and address, and the ranks torchrun gives it. Runs unchanged under
torchrun; under `--nnodes 2 --nproc-per-node 2` it shows two hostnames, two addresses, ranks 0-1 on the first node."""
import os
import socket

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
host = socket.gethostname()
print(f"{host} {socket.gethostbyname(host)}: RANK={os.environ['RANK']} LOCAL_RANK={os.environ['LOCAL_RANK']} "
      f"GROUP_RANK={os.environ['GROUP_RANK']} MASTER_ADDR={os.environ['MASTER_ADDR']}")
t = torch.ones(1)
dist.all_reduce(t)  # the ranks of both nodes really talk: the sum is the world's size
print(f"all_reduce across nodes: {t.item():g}")
dist.destroy_process_group()
