"""Master/worker task dispatch: the master takes a request with recv() WITHOUT
src but replies to the rank it expects, ignoring the returned sender.

Pattern: the classic MPI manager/worker loop (Gropp/Lusk/Skjellum, "Using
MPI", manager/worker example: receive with MPI_ANY_SOURCE, reply to
status.MPI_SOURCE) ported to torch.distributed with the reply address taken
from the loop counter instead of from the sender rank that recv returns
(torch.distributed docs, recv: "Will receive from any process if
unspecified." / Returns "Sender rank").

World size 4.  Workers ask for a task after 0.15/0.30/0.45 s, so in a quiet
run requests arrive in rank order and the program passes.  If any other
worker's request is matched first, the master blocks sending to a worker that
is itself blocked sending its request: a deadlock that the 10 s gloo timeout
ends with "Timed out waiting ... for send/recv operation to complete".
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
    for w in range(1, world):
        req = torch.zeros(1)
        dist.recv(req)  # BUG: no src, returned sender ignored; assumes worker w
        dist.send(tasks[w], dst=w)
else:  # worker
    time.sleep(0.15 * rank)  # finishes its previous task
    dist.send(torch.tensor([float(rank)]), dst=0)
    task = torch.zeros(1)
    dist.recv(task, src=0)
    assert task.item() == 100.0 + rank, (
        f"worker {rank} got task {task.item()} meant for another worker")

dist.destroy_process_group()
