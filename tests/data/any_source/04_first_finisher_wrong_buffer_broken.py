"""Who-finished-first protocol: the coordinator reads the sender rank that
recv() WITHOUT src returns, but receives into the buffer of the worker it
expects to win.

Pattern: two workers race (e.g. speculative search / backup tasks); rank 0
takes the first answer with an any-source recv, uses the returned rank to
decide who lost, then receives the loser's answer with an explicit src.  The
first recv, however, writes into worker 1's slot -- the code assumes worker 1
(the faster one in testing) wins.  torch.distributed docs, recv: "Will receive
from any process if unspecified." / Returns "Sender rank"; MPI analogue: using
MPI_ANY_SOURCE but not pairing the data with status.MPI_SOURCE.

World size 3.  Worker 1 answers after 0.2 s, worker 2 after 2.0 s, so in a
quiet run the winner is rank 1 and the program passes.  If worker 2 wins,
worker 2's answer lands in slot 1, slot 1 is then overwritten with worker 1's
answer and slot 2 stays empty: the final check fails.
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
    winner = dist.recv(slots[1])  # BUG: buffer assumes worker 1 is first
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
