"""Ring token loop: rank 0 waits for the token "from its ring predecessor" with
irecv() WITHOUT src, while the other neighbour also sends it a per-round ack.

Pattern: a hand-written ring (0 -> 1 -> 2 -> 0) repeated for several rounds;
rank 1 additionally acknowledges each round to rank 0 (e.g. "checkpoint shard
written").  Rank 0's irecv for the returning token has no src, so in a round
where rank 1's ack gets there before rank 2's token, the ack is taken as the
token.  torch.distributed docs, irecv: "src (int, optional) - Source rank on
global process group (regardless of group argument). Will receive from any
process if unspecified."

World size 3, 3 rounds.  The token comes back ~0.1 s after rank 0 sends it;
rank 1's ack follows 0.3 s after rank 1 forwards the token, so in a quiet run
the token always wins and the program passes.  If the ack is matched first,
rank 0's token check fails.
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
        work = dist.irecv(tok)  # BUG: no src; assumes the token from rank 2
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
