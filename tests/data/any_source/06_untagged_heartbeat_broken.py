"""Aggregator loop uses recv() WITHOUT src on tag 0, assuming only workers send
untagged traffic -- but one send of the metrics rank has no tag.

Pattern: "tags used on some sends but not others".  Rank 0 collects worker
results with an any-source recv and files each under the returned rank, which
is fine while workers are the only tag-0 senders.  The metrics rank tags its
stats (tag=METRICS) but its heartbeat was sent with the default tag 0, so the
result loop may match it.  torch.distributed docs, recv: "src (int, optional)
- Source rank ... Will receive from any process if unspecified."; "tag (int,
optional) - Tag to match recv with remote send"; Returns "Sender rank".

World size 4: rank 0 aggregator, ranks 1-2 workers, rank 3 metrics rank.
Workers report after 0.05/0.1 s, the heartbeat comes at 0.6 s, so in a quiet
run the loop only sees workers and passes.  If the heartbeat is matched by the
loop, the returned sender is 3 and the aggregator's check fails.
"""
import datetime
import os
import time

import torch
import torch.distributed as dist

METRICS = 7
dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=10))
rank = int(os.environ["RANK"])
assert int(os.environ["WORLD_SIZE"]) == 4, "run with --nproc-per-node 4"

if rank == 0:
    results = {}
    for _ in range(2):
        buf = torch.zeros(2)
        src = dist.recv(buf)  # BUG: no src, tag 0; assumes a worker sent it
        assert src in (1, 2), (
            f"aggregator: result loop matched a message from rank {src} "
            f"({buf.tolist()}), not from a worker")
        results[src] = buf.clone()
    beat = torch.zeros(2)
    dist.recv(beat, src=3)
    stats = torch.zeros(2)
    dist.recv(stats, src=3, tag=METRICS)
    assert results[1][0] == 1 and results[2][0] == 2, f"bad results {results}"
    assert beat[0] == -1 and stats[0] == 42, f"bad metrics {beat} {stats}"
elif rank in (1, 2):
    time.sleep(0.05 * rank)  # local step
    dist.send(torch.tensor([float(rank), 0.5]), dst=0)
else:
    time.sleep(0.6)  # metrics rank wakes up
    dist.send(torch.tensor([-1.0, 0.0]), dst=0)  # heartbeat, no tag
    dist.send(torch.tensor([42.0, 0.0]), dst=0, tag=METRICS)

dist.destroy_process_group()
