"""A training loop that survives a node's death under torchrun's restarts: rank 0 saves the step reached after every
step, and a restarted worker resumes after it. The checkpoint lives in CKPT_DIR (default: the working directory),
a folder every node sees, as a shared file system would be on a cluster.

    python -m sandbox.run --launcher torchrun --nnodes 2 --nproc-per-node 2 --max-restarts 1 \\
        --kill-node 1@rank2:10 examples/checkpointed.py
"""
import os
import time

import torch
import torch.distributed as dist

STEPS = 20
dist.init_process_group("gloo")
rank = dist.get_rank()
ckpt = os.path.join(os.environ.get("CKPT_DIR", "."), "checkpointed.pt")
start = torch.load(ckpt)["step"] + 1 if os.path.exists(ckpt) else 0
if rank == 0:
    print(f"starting at step {start} (restart {os.environ.get('TORCHELASTIC_RESTART_COUNT', '0')})")
for step in range(start, STEPS):
    grad = torch.ones(1)
    dist.all_reduce(grad)  # one step's gradient, summed over every rank of every node
    if rank == 0:
        torch.save({"step": step}, ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)  # a checkpoint is written whole or not at all
    time.sleep(0.05)
if rank == 0:
    print(f"finished {STEPS} steps")
    os.remove(ckpt)  # the job is done: the next run starts from step 0
dist.destroy_process_group()
