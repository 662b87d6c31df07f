"""FIXED twin of 04_first_finisher_wrong_buffer_broken.py.

Identical except for the standard remedy: the any-source recv goes into a
scratch buffer that is then filed under the returned sender rank
(torch.distributed docs, recv: Returns "Sender rank"), so each slot holds its
own worker's answer whoever wins.  Both worker sends are matched (one by the
any-source recv, the other by recv(src=loser)).
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 3, "run with --nproc-per-node 3"

if rank == 0:
    slots = {1: torch.zeros(2), 2: torch.zeros(2)}
    first = torch.zeros(2)
    winner = dist.recv(first)  # FIX: file the data under the returned rank
    slots[winner] = first
    loser = 3 - winner
    dist.recv(slots[loser], src=loser)
    print(f"winner: rank {winner}", flush=True)
    for w in (1, 2):
        assert slots[w][0].item() == w, (
            f"coordinator: slot {w} holds {slots[w].tolist()}, "
            f"not worker {w}'s answer (winner was {winner})")
        assert slots[w][1].item() == 10 * w, f"bad answer in slot {w}"
else:
    time.sleep(0.2 if rank == 1 else 2.0)  # search effort differs per worker
    dist.send(torch.tensor([float(rank), 10.0 * rank]), dst=0)

dist.destroy_process_group()
