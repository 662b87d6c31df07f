r"""master-addr-localhost: a script that worked on one machine sets MASTER_ADDR=localhost; on two nodes the second
node's ranks dial their own machine, where no rendezvous store listens.

Source: the `setup()` of PyTorch's "Getting Started with Distributed Data Parallel" tutorial
(https://pytorch.org/tutorials/intermediate/ddp_tutorial.html) sets `os.environ['MASTER_ADDR'] = 'localhost'` before
`init_process_group`, and scripts grown from it carry the line to a cluster. pytorch/pytorch#76069 is such a report
(a job on 4 nodes hanging in `init_process_group`), answered "you should not be using `localhost` as in your case
each individual node is acting as the rendezvous point".

Symptom: on one node it works. On two, every rank hangs in init_process_group, silently: node1's ranks retry a
connection that is refused (`The client socket has timed out after ... while trying to connect to (localhost,
29500)` once the timeout, 30 minutes by default, has passed), and node0's ranks wait for them.

Root cause: `init_process_group` with the default `init_method="env://"` meets at MASTER_ADDR:MASTER_PORT
(torch/distributed/rendezvous.py, `_env_rendezvous_handler`). `torchrun --nnodes 2` sets MASTER_ADDR to the master
node, node0, whose name every node resolves to node0's address, and hosts the rendezvous store there. The script
overwrites it with `localhost`, which every machine resolves to itself: on node1 that is node1's own loopback,
where nothing listens on MASTER_PORT. Two places named alike, so the ranks can never meet.

Fix: keep the launcher's MASTER_ADDR and MASTER_PORT: call `init_process_group(backend)` with `env://` and set
nothing. A script that must also run alone, without a launcher, sets a default only
(`os.environ.setdefault("MASTER_ADDR", "localhost")`), which a launcher's value overrides.

Simulated on 2 nodes: each node is a Linux network namespace with its own hostname (node0, node1), address and
loopback, joined by a private bridge (sandbox/nodes.py; needs root). The sandbox hosts the store on node0 as
torchrun's agent does and gives every rank torchrun's multi-node environment (MASTER_ADDR=node0).

Run: python -m sandbox.repro master-addr-localhost
    broken: HANG [init_mismatch]: 4 ranks in 2.26 s
      Ranks 2 and 3 (node1) rendezvous at localhost:52411 (env:// with MASTER_ADDR=localhost, at
      sandbox/bugs/master_addr_localhost.py:70), which on node1 is node1's own loopback, where no store
      listens: the store is on node0, the master node, so they can never meet ranks 0 and 1 (node0).
      `localhost` names a different machine on every node: keep the launcher's MASTER_ADDR (env:// reads
      MASTER_ADDR and MASTER_PORT), which names node0 on every node.
      expected: hang, init_mismatch, culprits [2, 3] -> as documented
    fixed: OK: 4 ranks in 1.31 s
      expected: ok, = single-process reference -> as documented
"""
import os

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, init

BUG = Bug(
    slug="master-addr-localhost", title="MASTER_ADDR=localhost on a second node",
    source="PyTorch's DDP tutorial's setup(), run on a cluster (pytorch/pytorch#76069)",
    symptom="on two nodes every rank hangs in init_process_group; node1's ranks dial localhost, their own machine",
    world_size=4, min_world_size=2, needs="cpu", nnodes=2,
    broken=Expect("hang", "init_mismatch", [2, 3], note="ranks 2-3 (node1) dial localhost, which is node1 itself"),
    fixed=Expect("ok", matches_reference=True))

SHARD = 3  # numbers per rank: rank r holds r*SHARD .. r*SHARD + SHARD - 1


def mean_of_shards() -> float:
    """What the job computes once it has started: the mean of every rank's numbers (an all_reduce)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    mine = torch.arange(rank * SHARD, (rank + 1) * SHARD, dtype=torch.float32)
    total = torch.stack([mine.sum(), torch.tensor(float(SHARD))])
    dist.all_reduce(total)
    dist.destroy_process_group()
    return (total[0] / total[1]).item()


def broken():
    # the tutorial's setup(): right on one machine, where rank 0 and its store are local
    os.environ["MASTER_ADDR"] = "localhost"  # BUG: on node1, localhost is node1; the store is on node0
    init()  # env://: MASTER_ADDR:MASTER_PORT
    return mean_of_shards()


def fixed():
    os.environ.setdefault("MASTER_ADDR", "localhost")  # FIX: a default for a run alone; the launcher's value wins
    init()  # env://: MASTER_ADDR (node0, from the launcher):MASTER_PORT
    return mean_of_shards()


def reference(world_size):
    return float(torch.arange(world_size * SHARD, dtype=torch.float32).mean())
