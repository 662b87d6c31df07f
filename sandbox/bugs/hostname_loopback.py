r"""hostname-loopback: each node's own hostname resolves to 127.0.1.1, so gloo listens on a loopback address and
tells the other nodes to connect there: they are refused.

Source: the hosts file the Debian and Ubuntu installers write maps the machine's own name to 127.0.1.1
(`127.0.1.1 node0`); gloo then picks the loopback. meta-pytorch/data#1142 is such a job ("tcp connection refused
when multinode training"), fixed with `export GLOO_SOCKET_IFNAME=eth0`, the variable PyTorch's docs name for it
(https://pytorch.org/docs/stable/distributed.html, "Common environment variables", "Choosing the network interface
to use").

Symptom: a job that starts on one node fails at start-up on two: `init_process_group` raises `Gloo connectFullMesh
failed with [...] timed out connecting: SO_ERROR: Connection refused, remote=[127.0.1.1]:<port>` on the ranks that
dial another node, and the others wait.

Root cause: without GLOO_SOCKET_IFNAME, gloo binds the address its node's hostname resolves to
(torch/csrc/distributed/c10d/ProcessGroupGloo.cpp, `createDefaultDevice`) and publishes it in the rendezvous store
for its peers. The rendezvous itself works: MASTER_ADDR (node0) resolves to node0's real address on node1, and
node0 finds it too, as the second of its addresses. But every node's own name resolves to 127.0.1.1 first, so every
rank publishes 127.0.1.1, and a peer on another node that dials it reaches its own machine, where nothing listens on
that port: refused. Ranks of the same node still reach each other, which is why one node works.

Fix: `export GLOO_SOCKET_IFNAME=eth0` (the interface that carries the node's address) on every node before the job
starts (NCCL_SOCKET_IFNAME likewise for NCCL's bootstrap), or map each hostname to the node's real address in
/etc/hosts. The fixed variant sets it in the ranks' environment before init_process_group, which is the same.

Simulated on 2 nodes: each node is a Linux network namespace with its own hostname (node0, node1), address on eth0
and loopback, joined by a private bridge (sandbox/nodes.py; needs root). Here each node's hosts file starts with
`127.0.1.1 <its own name>`, as a Debian install writes it (Cluster(hostname_loopback=True)).

Run: python -m sandbox.repro hostname-loopback
    broken: ERROR [loopback_address]: 4 ranks in 3.09 s
      Ranks 2 and 3 (node1) could not connect to their peers on another node: gloo on the other node listens
      on 127.0.1.1, a loopback address, and told its peers to connect there (Connection refused,
      remote=[127.0.1.1]:12198), which from node1 is node1 itself. Without GLOO_SOCKET_IFNAME, gloo binds the
      address its node's hostname resolves to, and here the node's hosts file maps its own name to 127.0.1.1
      (the `127.0.1.1 <hostname>` line the Debian and Ubuntu installers write into /etc/hosts), so no rank can
      reach a rank of another node. Set GLOO_SOCKET_IFNAME on every node to the interface that carries the
      node's address (`GLOO_SOCKET_IFNAME=eth0`, as PyTorch's docs advise), or map each hostname to that
      address in /etc/hosts.
      expected: error, loopback_address, culprits [0, 1, 2, 3], error /Connection refused, remote=\[127\.0\.1\.1\]/ -> as documented
    fixed: OK: 4 ranks in 3.59 s
      expected: ok, = single-process reference -> as documented
"""
import os

import torch
import torch.distributed as dist

from sandbox.bugs import Bug, Expect, init

BUG = Bug(
    slug="hostname-loopback", title="A hostname that resolves to 127.0.1.1",
    source="a Debian-style /etc/hosts on every node (meta-pytorch/data#1142)",
    symptom="init_process_group fails on two nodes: Gloo connectFullMesh failed ... Connection refused, "
            "remote=[127.0.1.1]",
    world_size=4, min_world_size=2, needs="cpu", nnodes=2, node_options={"hostname_loopback": True},
    broken=Expect("error", "loopback_address", [0, 1, 2, 3], error=r"Connection refused, remote=\[127\.0\.1\.1\]",
                  note="every node's gloo listens on 127.0.1.1; peers on the other node are refused"),
    fixed=Expect("ok", matches_reference=True))

SHARD = 3  # numbers per rank: rank r holds r*SHARD .. r*SHARD + SHARD - 1


def max_of_shards() -> float:
    """What the job computes once it has started: the largest of every rank's numbers (an all_reduce)."""
    rank = dist.get_rank()
    top = torch.arange(rank * SHARD, (rank + 1) * SHARD, dtype=torch.float32).max()
    dist.all_reduce(top, op=dist.ReduceOp.MAX)
    dist.destroy_process_group()
    return top.item()


def broken():
    # BUG (not in the code): each node's /etc/hosts maps its own name to 127.0.1.1, and gloo binds that
    init()  # BUG: no GLOO_SOCKET_IFNAME, so gloo listens where the hostname resolves: 127.0.1.1
    return max_of_shards()


def fixed():
    os.environ["GLOO_SOCKET_IFNAME"] = "eth0"  # FIX: `export GLOO_SOCKET_IFNAME=eth0` on every node
    init()  # gloo listens on eth0's address, which the other node can reach
    return max_of_shards()


def reference(world_size):
    return float(world_size * SHARD - 1)
