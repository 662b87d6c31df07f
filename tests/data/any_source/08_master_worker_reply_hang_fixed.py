"""FIXED twin of 08_master_worker_reply_hang_broken.py.

Identical except for the standard remedy: the master replies to the sender
rank that the any-source recv returns (torch.distributed docs, recv: Returns
"Sender rank"; MPI: reply to status.MPI_SOURCE).  Each worker's request is
matched by one loop recv and answered, in any arrival order.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
assert world == 4, "run with --nproc-per-node 4"

if rank == 0:  # master
    tasks = {w: torch.tensor([100.0 + w]) for w in range(1, world)}
    for _ in range(1, world):
        req = torch.zeros(1)
        w = dist.recv(req)  # FIX: reply to the sender that recv returns
        dist.send(tasks[w], dst=w)
else:  # worker
    time.sleep(0.15 * rank)  # finishes its previous task
    dist.send(torch.tensor([float(rank)]), dst=0)
    task = torch.zeros(1)
    dist.recv(task, src=0)
    assert task.item() == 100.0 + rank, (
        f"worker {rank} got task {task.item()} meant for another worker")

dist.destroy_process_group()
