"""FIXED twin of 05_reply_irecv_unrelated_msg_broken.py.

Identical except for the standard remedy: the reply irecv names the server,
`dist.irecv(reply, src=0)` (torch.distributed docs, irecv: "src ... Will
receive from any process if unspecified.").  The monitor's notice stays
pending until `recv(notice, src=2)`, so it is matched in either arrival order.
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
    work = dist.irecv(reply, src=0)  # FIX: name the server
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
