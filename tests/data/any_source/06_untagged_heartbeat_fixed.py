"""FIXED twin of 06_untagged_heartbeat_broken.py.

Identical except for the standard remedy: distinct tags.  The heartbeat gets
its own tag (HEARTBEAT) on both the send and the matching recv, so the only
tag-0 senders to rank 0 are the workers and the any-source result loop (which
files data under the returned sender) can only match them
(torch.distributed docs, recv: "tag (int, optional) - Tag to match recv with
remote send").  Every send is matched in any arrival order.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

METRICS = 7
HEARTBEAT = 8  # FIX: distinct tag for the heartbeat
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 4, "run with --nproc-per-node 4"

if rank == 0:
    results = {}
    for _ in range(2):
        buf = torch.zeros(2)
        src = dist.recv(buf)  # no src, tag 0: only workers send tag 0 now
        assert src in (1, 2), (
            f"aggregator: result loop matched a message from rank {src} "
            f"({buf.tolist()}), not from a worker")
        results[src] = buf.clone()
    beat = torch.zeros(2)
    dist.recv(beat, src=3, tag=HEARTBEAT)
    stats = torch.zeros(2)
    dist.recv(stats, src=3, tag=METRICS)
    assert results[1][0] == 1 and results[2][0] == 2, f"bad results {results}"
    assert beat[0] == -1 and stats[0] == 42, f"bad metrics {beat} {stats}"
elif rank in (1, 2):
    time.sleep(0.05 * rank)  # local step
    dist.send(torch.tensor([float(rank), 0.5]), dst=0)
else:
    time.sleep(0.6)  # metrics rank wakes up
    dist.send(torch.tensor([-1.0, 0.0]), dst=0, tag=HEARTBEAT)  # FIX
    dist.send(torch.tensor([42.0, 0.0]), dst=0, tag=METRICS)

dist.destroy_process_group()
