"""Client posts irecv() WITHOUT src for the server's reply while a monitor rank
sends it an unrelated notice of the same shape.

Pattern: request/reply over point-to-point ops; the client sends a request to
rank 0 and posts `dist.irecv(reply)` so it can overlap local work.  A monitor
rank (rank 2) separately pushes an "epoch notice" to the client, which the
client reads later with an explicit src.  torch.distributed docs, irecv: "src
(int, optional) - Source rank on global process group (regardless of group
argument). Will receive from any process if unspecified."  The MPI analogue is
a reply received with MPI_ANY_SOURCE while other traffic to the same rank is
in flight (MPI standard, "Message Selection").

World size 3.  The server replies 0.1 s after the request; the monitor sends
its notice after 0.8 s, so in a quiet run the reply wins and the program
passes.  If the notice is matched first, the client treats it as the reply and
its check fails.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 3, "run with --nproc-per-node 3"

if rank == 0:  # server
    req = torch.zeros(3)
    dist.recv(req, src=1)
    time.sleep(0.1)  # handle the request
    dist.send(req * 2, dst=1)
elif rank == 1:  # client
    req = torch.tensor([1.0, 2.0, 3.0])
    dist.send(req, dst=0)
    reply = torch.zeros(3)
    work = dist.irecv(reply)  # BUG: no src; assumes the server's reply
    local = req.sum()  # overlapped local work
    work.wait()
    assert torch.equal(reply, req * 2), (
        f"client: reply {reply.tolist()} came from rank "
        f"{work._source_rank()}, not the server's answer")
    notice = torch.zeros(3)
    dist.recv(notice, src=2)
    assert notice[0].item() == 7.0, f"bad notice {notice}"
    print("client done", local.item(), flush=True)
else:  # monitor
    time.sleep(0.8)  # gathers cluster health, then notifies the client
    dist.send(torch.full((3,), 7.0), dst=1)

dist.destroy_process_group()
