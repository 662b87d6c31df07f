"""Which node a rank runs on, decided once (`sandbox.topology`): the sandbox's launcher fills nodes in rank order,
torchrun's rendezvous orders them by hostname as text. The environment a rank gets, the node a report names and the
ranks a killed node takes with it all read the one answer."""
from sandbox import faults, rank, topology
from sandbox.result import Diagnosis, RankResult
from sandbox.topology import Topology


def test_the_sandbox_fills_nodes_in_rank_order():
    t = Topology(nnodes=3, per_node=2)
    assert [t.host_of(r) for r in range(6)] == ["node0", "node0", "node1", "node1", "node2", "node2"]
    assert [t.local_rank(r) for r in range(6)] == [0, 1, 0, 1, 0, 1]
    assert t.ranks_on(2) == [4, 5] and t.world_size == 6


def test_torchruns_rendezvous_orders_nodes_by_hostname_as_text():
    """torch's _NodeDesc sorts by FQDN first: with 12 nodes, node10 and node11 come right after node1."""
    t = Topology(nnodes=12, per_node=1, by_hostname=True)
    assert [t.host_of(r) for r in range(4)] == ["node0", "node1", "node10", "node11"]
    assert t.ranks_on(2) == [4] and t.ranks_on(10) == [2]
    assert [t.host_of(r) for r in range(12)] == sorted(topology.hostname(i) for i in range(12))
    # up to 10 nodes the two orders agree
    assert [Topology(nnodes=10, per_node=2, by_hostname=True).host_of(r) for r in range(20)] == \
        [Topology(nnodes=10, per_node=2).host_of(r) for r in range(20)]


def test_the_ranks_environment_follows_the_topology():
    env = rank.torchrun_env(5, 6, 29500, "x", nodes=Topology(nnodes=3, per_node=2), master_addr="node0")
    assert (env["NODE_RANK"], env["GROUP_RANK"], env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"],
            env["GROUP_WORLD_SIZE"]) == ("2", "2", "1", "2", "3")
    one = rank.torchrun_env(2, 3, 29500, "x")
    assert "NODE_RANK" not in one and (one["LOCAL_RANK"], one["GROUP_RANK"], one["GROUP_WORLD_SIZE"]) == ("2", "0", "1")


def test_a_killed_node_whose_ranks_never_said_where_they_ran_takes_the_topologys_ranks():
    """faults.node_failure once counted node k's ranks as k*P.., which torchrun's order contradicts from node10 on."""
    kill = {"node": 10, "when": "at 3 s"}
    ranks = [RankResult(rank=r, outcome="crashed") for r in range(12)]
    d = faults.node_failure(kill, Diagnosis(kind="none", cause="."), ranks,
                            Topology(nnodes=12, per_node=1, by_hostname=True))
    assert (d.culprit_ranks, d.details["node"]) == ([2], "node10")
    assert d.summary.startswith("Node10 died: killed at 3 s, taking rank 2 with it")
    said = [RankResult(rank=r, outcome="crashed", host=topology.hostname(r)) for r in range(12)]
    assert faults.node_failure(kill, Diagnosis(kind="none", cause="."), said, Topology(nnodes=12, per_node=1)
                               ).culprit_ranks == [10]  # where the ranks said they ran comes first
