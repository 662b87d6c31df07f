"""Which node each rank runs on and what the nodes are called, decided once: a run makes its `Topology` when it
starts and passes it down (to the zygote in the spec, to the fault schedule, to the report), so the environment a
rank is given, the node it is forked into, the node a report names beside it and the ranks a killed node takes
with it can never disagree.

Node i is called `node<i>`: its hostname inside the simulated node (`sandbox.nodes`) and its name in every report.
How ranks fill the nodes depends on who assigns them:

- the sandbox's own launcher fills them in rank order, P ranks each (ranks 0..P-1 on node0), as `torchrun
  --node-rank` does;
- torchrun's c10d rendezvous (`--launcher torchrun`, no --node-rank) gives group ranks in the order of its
  participants, which sort by hostname as text, then pid (`_NodeDesc` is an ordered dataclass whose first field is
  the FQDN, and `_mark_rendezvous_complete` enumerates `sorted(participants)`: torch/distributed/elastic/rendezvous/
  dynamic_rendezvous.py): with 11 nodes or more node10 comes before node2.

Torch-free, and imported by the ranks.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property


def hostname(node: int) -> str:
    """Node `node`'s name: its hostname, and what every report calls it."""
    return f"node{node}"


@dataclass(frozen=True)
class Topology:
    nnodes: int
    per_node: int            # ranks on each node (torchrun's --nproc-per-node)
    by_hostname: bool = False  # torchrun's rendezvous orders the nodes (see the module's docstring)

    @property
    def world_size(self) -> int:
        return self.nnodes * self.per_node

    @cached_property
    def order(self) -> tuple[int, ...]:
        """The node indices in group-rank order: order[g] is the node whose ranks are g*P .. g*P+P-1."""
        nodes = range(self.nnodes)
        return tuple(sorted(nodes, key=hostname) if self.by_hostname else nodes)

    def node_of(self, rank: int) -> int:
        return self.order[rank // self.per_node]

    def host_of(self, rank: int) -> str:
        return hostname(self.node_of(rank))

    def group_rank(self, rank: int) -> int:
        """The rank's node's place in the job (torchrun's GROUP_RANK, the sandbox's NODE_RANK)."""
        return rank // self.per_node

    def local_rank(self, rank: int) -> int:
        return rank % self.per_node

    def ranks_on(self, node: int) -> list[int]:
        g = self.order.index(node)
        return list(range(g * self.per_node, (g + 1) * self.per_node))


def single(world_size: int) -> Topology:
    """One host: every rank on it (no simulated node)."""
    return Topology(nnodes=1, per_node=world_size)
