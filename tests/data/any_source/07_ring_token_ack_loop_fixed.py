"""FIXED twin of 07_ring_token_ack_loop_broken.py.

Identical except for the standard remedy: the token irecv names the ring
predecessor, `dist.irecv(tok, src=2)` (torch.distributed docs, irecv: "src ...
Will receive from any process if unspecified.").  Rank 1's ack stays pending
until `recv(ack, src=1)` in the same round, so every send is matched in either
arrival order and no round can deadlock.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 3, "run with --nproc-per-node 3"

for rnd in range(3):
    tok = torch.zeros(1)
    if rank == 0:
        dist.send(torch.tensor([10.0 * rnd]), dst=1)
        work = dist.irecv(tok, src=2)  # FIX: name the ring predecessor
        work.wait()
        assert tok.item() == 10.0 * rnd + 2, (
            f"rank 0, round {rnd}: token is {tok.item()} from rank "
            f"{work._source_rank()}, expected {10.0 * rnd + 2} from rank 2")
        ack = torch.zeros(1)
        dist.recv(ack, src=1)
        assert ack.item() == -1.0, f"bad ack {ack.item()}"
    elif rank == 1:
        dist.recv(tok, src=0)
        time.sleep(0.05)
        dist.send(tok + 1, dst=2)
        time.sleep(0.3)  # writes its checkpoint shard, then acks
        dist.send(torch.tensor([-1.0]), dst=0)
    else:
        dist.recv(tok, src=1)
        time.sleep(0.05)
        dist.send(tok + 1, dst=0)

dist.destroy_process_group()
