r"""local-rank-as-rank: `init_process_group(rank=local_rank)`: right on one node, where LOCAL_RANK equals RANK; on
two, node1's processes claim ranks 0 and 1 again, and nobody joins as ranks 2 and 3.

Source: scripts written for `python -m torch.distributed.launch`, which passed `--local_rank` to each process, pass
that number as `rank=`. pytorch/pytorch#23074 is such a job, 2 nodes of 2 processes hanging at start-up, answered
"`local_rank` for the two nodes are actually 0, 1 and 0, 1, so it hangs as it never sees 2 and 3". torchrun's docs
(https://pytorch.org/docs/stable/elastic/run.html, "Environment Variables") define both: LOCAL_RANK, the rank of the
process within its node; RANK, its rank in the whole job.

Symptom: on one node it works. On two, every process hangs in init_process_group, silently, until the timeout (30
minutes by default); then every one raises `DistStoreError: wait timeout after 1800000ms, keys:
/default_pg/0//cpu//0/2`: gloo waited for rank 2's address, which nobody published.

Root cause: `rank=` overrides RANK (torch/distributed/distributed_c10d.py, `init_process_group`: "Rank of the
current process (it should be a number between 0 and world_size-1)"). Node1's processes pass their LOCAL_RANK, 0 and
1, so two processes claim rank 0 and two claim rank 1, and none claims 2 or 3. torch checks neither: each process
publishes its address under the rank it claimed in the rendezvous store (a second claim overwrites the first) and
waits for the addresses of every other rank, and those of ranks 2 and 3 never come.

Fix: pass RANK (`rank=int(os.environ["RANK"])`), or leave `rank=` and `world_size=` out: `env://` reads RANK and
WORLD_SIZE itself. Keep LOCAL_RANK for what is per node: the GPU to use (`torch.cuda.set_device(local_rank)`), a
per-node download or cache.

Simulated on 2 nodes: each node is a Linux network namespace with its own hostname (node0, node1), address and
loopback, joined by a private bridge (sandbox/nodes.py; needs root). Every rank gets torchrun's multi-node
environment: RANK 0-3, LOCAL_RANK 0-1 on each node. The broken variant gives init_process_group a 10 s timeout
instead of the default 30 minutes, so the error comes within seconds.

Run: python -m sandbox.repro local-rank-as-rank
    broken: ERROR [duplicate_rank]: 4 ranks in 11.79 s
      Ranks 2 and 3 (node1) passed rank=local_rank to init_process_group at
      sandbox/bugs/local_rank_as_rank.py:76: their LOCAL_RANK (0, 1), which numbers the processes within a
      node. Ranks 0 and 1 (node0) are then claimed twice, by processes on node0 and on node1, and no process
      joins as ranks 2 and 3 (node1), so every process waits in init_process_group for their addresses until
      the timeout (DistStoreError: wait timeout after 10000ms, keys: /default_pg/0//cpu//0/2). Pass RANK, the
      rank in the whole job (or leave rank= out: env:// reads RANK); LOCAL_RANK is for what is per node, such
      as the GPU to use.
      expected: error, duplicate_rank, culprits [2, 3], error /wait timeout after \d+ ?ms, keys: / -> as documented
    fixed: OK: 4 ranks in 1.90 s
      expected: ok, = single-process reference -> as documented
"""
import os

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, init

BUG = Bug(
    slug="local-rank-as-rank", title="LOCAL_RANK passed where RANK was meant",
    source="scripts written for torch.distributed.launch's --local_rank (pytorch/pytorch#23074)",
    symptom="on two nodes every process hangs in init_process_group, then raises a store wait timeout for rank 2",
    world_size=4, min_world_size=2, needs="cpu", nnodes=2,
    broken=Expect("error", "duplicate_rank", [2, 3], error=r"wait timeout after \d+ ?ms, keys: ",
                  note="ranks 2-3 (node1) claim ranks 0-1 again; nobody joins as 2 or 3"),
    fixed=Expect("ok", matches_reference=True))

STORE_WAIT_S = 10  # the broken variant's init timeout: a stand-in for the default 30 minutes
SHARD = 3          # numbers per rank: rank r holds r*SHARD .. r*SHARD + SHARD - 1


def sum_of_shards(local_rank: int) -> float:
    """What the job computes once it has started: the sum of every rank's numbers, each rank's share chosen by its
    rank in the whole job (an all_reduce). LOCAL_RANK picks what is per node; on CPU there is no GPU to pick."""
    rank = dist.get_rank()
    print(f"rank {rank} is process {local_rank} of {os.environ['LOCAL_WORLD_SIZE']} on its node")
    total = torch.arange(rank * SHARD, (rank + 1) * SHARD, dtype=torch.float32).sum()
    dist.all_reduce(total)
    dist.destroy_process_group()
    return total.item()


def broken():
    local_rank = int(os.environ["LOCAL_RANK"])  # what torch.distributed.launch passed as --local_rank
    world_size = int(os.environ["WORLD_SIZE"])
    init(rank=local_rank, world_size=world_size, timeout_s=STORE_WAIT_S)  # BUG: the rank within the node
    return sum_of_shards(local_rank)


def fixed():
    local_rank = int(os.environ["LOCAL_RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    init(rank=int(os.environ["RANK"]), world_size=world_size)  # FIX: the rank in the whole job (or leave it out)
    return sum_of_shards(local_rank)


def reference(world_size):
    return float(torch.arange(world_size * SHARD, dtype=torch.float32).sum())
