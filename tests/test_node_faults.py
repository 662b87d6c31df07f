"""Faults a simulated node can suffer (sandbox.nodes), for real: a killed node, a link taken down and brought back,
a capped link, and a node whose own name resolves to the loopback. Needs root; skipped with the reason elsewhere.
How fast a capped link carries is measured by the bench, not asserted here."""
import os
import subprocess
import sys

import pytest

from conftest import still_running
from sandbox import nodes
from test_nodes import T, in_node

OK, WHY = nodes.available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)

CONNECT = ("import socket\ntry:\n    socket.create_connection(('node1', %d), timeout=%s).close(); print('connected')\n"
           "except OSError as e:\n    print(type(e).__name__)")
LISTEN = "import socket, time; s = socket.create_server(('0.0.0.0', 0)); print(s.getsockname()[1], flush=True); " \
         "time.sleep(60)"


def test_killing_a_node_ends_every_process_inside_it_and_only_those(clean):
    with nodes.Cluster(nnodes=2) as c:
        inside = [c.node(1).popen(["sleep", "60"]) for _ in range(2)]
        beside = c.node(0).popen(["sleep", "60"])
        try:
            killed = c.kill_node(1)
            assert sorted(killed) == sorted(p.pid for p in inside)
            assert [p.wait(timeout=T) for p in inside] == [-9, -9]
            assert still_running([beside.pid], grace=0) == [beside.pid]
            # the node itself stays: a new process starts there with its name and address
            assert in_node(c.node(1), "import socket; print(socket.gethostname())") == "node1"
        finally:
            beside.kill()
            beside.wait(timeout=T)


def test_a_link_down_cuts_the_node_off_until_it_comes_back_up(clean):
    with nodes.Cluster(nnodes=2) as c:
        srv = c.node(1).popen([sys.executable, "-c", LISTEN], stdout=subprocess.PIPE, text=True)
        try:
            port = int(srv.stdout.readline())
            assert in_node(c.node(0), CONNECT % (port, 5)) == "connected"
            c.set_link(1, up=False)
            assert in_node(c.node(0), CONNECT % (port, 1)) in ("TimeoutError", "OSError")
            c.set_link(1, up=True)
            assert in_node(c.node(0), CONNECT % (port, 5)) == "connected"
        finally:
            srv.kill()
            srv.wait(timeout=T)
            srv.stdout.close()


def qdiscs(ns: str, dev: str) -> str:
    return subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True,
                          timeout=T, check=True).stdout


def test_a_cap_is_a_token_bucket_on_both_ends_of_the_link_and_can_be_lifted(clean):
    with nodes.Cluster(nnodes=2, cap="100mbit") as c:
        for i in (0, 1):
            assert "tbf" in qdiscs(c.node(i).netns, "eth0") and "rate 100Mbit" in qdiscs(c.node(i).netns, "eth0")
            assert "rate 100Mbit" in qdiscs(c.switch, f"v{i}")
        c.cap_link(1, "1gbit")
        assert "rate 1Gbit" in qdiscs(c.node(1).netns, "eth0") and "rate 100Mbit" in qdiscs(c.node(0).netns, "eth0")
        c.cap_link(1, None)
        assert "tbf" not in qdiscs(c.node(1).netns, "eth0") + qdiscs(c.switch, "v1")
    assert nodes.leftovers(os.getpid()) == []


@pytest.mark.parametrize("rate", ["fast", "10", "-5mbit", "0gbit"])
def test_a_bad_rate_is_one_sentence(rate):
    with pytest.raises(ValueError, match=r"^a link rate is a number and a unit .*\.$"):
        nodes.Cluster(nnodes=2, cap=rate)


def test_hostname_loopback_resolves_each_node_to_127_0_1_1_for_itself_only(clean):
    with nodes.Cluster(nnodes=2, hostname_loopback=True) as c:
        probe = "import socket; print(*(socket.gethostbyname(h) for h in (socket.gethostname(), 'node0', 'node1')))"
        assert in_node(c.node(0), probe).split() == ["127.0.1.1", "127.0.1.1", c.node(1).address]
        assert in_node(c.node(1), probe).split() == ["127.0.1.1", c.node(0).address, "127.0.1.1"]
