"""Simulated nodes (sandbox.nodes), for real: namespaces, a bridge, hostnames and sockets between nodes, and nothing
of ours left after any ending, a SIGKILLed owner included. Needs root; skipped with the reason elsewhere."""
import errno
import os
import signal
import subprocess
import sys

import pytest

from conftest import ROOT, still_running
from sandbox import nodes

OK, WHY = nodes.available()
pytestmark = pytest.mark.skipif(not OK, reason=WHY)

T = 30  # seconds for any one process in a node: they take well under one


def in_node(node: nodes.Node, code: str, *, how: str = "popen") -> str:
    """Run python `code` inside `node` and return what it printed; a failure shows its stderr."""
    argv = [sys.executable, "-c", code]
    if how == "popen":
        p = node.popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    else:
        p = subprocess.Popen(node.wrap(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = p.communicate(timeout=T)
    finally:
        p.kill()
        p.wait(timeout=T)
    assert p.returncode == 0, err
    return out.strip()


def links() -> set:
    """The machine's own interfaces, by name."""
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, timeout=T, check=True).stdout
    return {line.split(":")[1].strip() for line in out.splitlines()}


@pytest.mark.parametrize("how", ["popen", "wrap"])
def test_each_node_has_its_hostname_resolving_to_its_address(clean, how):
    with nodes.Cluster(nnodes=2) as c:
        seen = [in_node(n, "import socket; h = socket.gethostname(); print(h, socket.gethostbyname(h), "
                           "socket.gethostbyname('node0'), socket.gethostbyname('node1'), "
                           "socket.gethostbyname('localhost'))", how=how).split() for n in c.nodes]
        a0, a1 = c.node(0).address, c.node(1).address
        assert seen == [["node0", a0, a0, a1, "127.0.0.1"], ["node1", a1, a0, a1, "127.0.0.1"]]
        assert a0 != a1 and c.node(1).hostname == "node1"
        # the machine's own name is untouched by what the nodes did
        assert subprocess.run(["hostname"], capture_output=True, text=True, timeout=T).stdout.strip() == os.uname()[1]


def test_two_nodes_talk_over_tcp_by_hostname(clean):
    server = ("import socket, sys\n"
              "s = socket.create_server(('0.0.0.0', 0)); print(s.getsockname()[1], flush=True)\n"
              "c, peer = s.accept(); c.sendall(c.recv(16) + b' from ' + socket.gethostname().encode()"
              " + b' seeing ' + peer[0].encode()); c.close()\n")
    with nodes.Cluster(nnodes=2) as c:
        srv = c.node(1).popen([sys.executable, "-c", server], stdout=subprocess.PIPE, text=True)
        try:
            port = int(srv.stdout.readline())
            got = in_node(c.node(0), "import socket; s = socket.create_connection(('node1', %d), timeout=10); "
                                     "s.sendall(b'hello'); print(s.recv(100).decode())" % port)
            srv.wait(timeout=T)
        finally:
            srv.kill()
            srv.wait(timeout=T)
            srv.stdout.close()
        # the peer address proves the bytes crossed the bridge, not a loopback
        assert got == f"hello from node1 seeing {c.node(0).address}"


def test_no_route_out_of_a_node(clean):
    with nodes.Cluster(nnodes=1) as c:
        n = c.node(0)
        # 192.0.2.1 is TEST-NET-1: never routed anywhere; with no default route the kernel refuses at once
        got = in_node(n, "import socket, time; s = socket.socket(); s.settimeout(5); t = time.monotonic()\n"
                         "try:\n    s.connect(('192.0.2.1', 9)); print('connected')\n"
                         "except OSError as e:\n    print(e.errno, time.monotonic() - t)")
        code, took = got.split()
        assert int(code) == errno.ENETUNREACH and float(took) < 1.0
        routes = subprocess.run(["ip", "-n", n.netns, "route"], capture_output=True, text=True, timeout=T).stdout
        assert "default" not in routes and c.subnet in routes


def test_the_machine_gains_no_interface():
    before = links()
    with nodes.Cluster(nnodes=3):
        during = links()
    assert during == before and links() == before


def test_nothing_left_after_a_clean_exit():
    with nodes.Cluster(nnodes=2) as c:
        # the twin: while it lives, the check sees it (namespaces, hosts folders, the pinning mounts)
        live = nodes.leftovers(os.getpid())
        assert {f"netns {ns}" for ns in c.names()} <= set(live)
        assert f"dir /etc/netns/{c.node(0).netns}" in live and f"mount /run/netns/{c.switch}" in live
    assert nodes.leftovers(os.getpid()) == []


def test_nothing_left_after_an_exception_or_a_process_still_inside(clean):
    with pytest.raises(KeyError):
        with nodes.Cluster(nnodes=2) as c:
            sleeper = c.node(1).popen(["sleep", "60"])
            raise KeyError("boom")
    assert nodes.leftovers(os.getpid()) == []
    # the process left inside would have kept its namespace alive without a name: teardown ended it
    assert sleeper.wait(timeout=T) == -signal.SIGKILL


OWNER = """
import subprocess, sys, time
from sandbox import nodes
c = nodes.Cluster(nnodes=2).__enter__()
p = c.node(0).popen(["sleep", "300"])
print(p.pid, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("by", ["cleanup_stale", "the next cluster"])
def test_a_sigkilled_owner_leaves_nothing_after_cleanup(clean, by):
    owner = subprocess.Popen([sys.executable, "-c", OWNER], stdout=subprocess.PIPE, text=True, cwd=ROOT,
                             env=dict(os.environ, PYTHONPATH=ROOT))
    try:
        sleeper = int(owner.stdout.readline())
    finally:
        owner.kill()  # SIGKILL: no __exit__, no finally in the owner
        owner.wait(timeout=T)
        owner.stdout.close()
    left = nodes.leftovers(owner.pid)
    assert len([x for x in left if x.startswith("netns ")]) == 3, left
    assert still_running([sleeper], grace=0) == [sleeper]  # orphaned inside node0
    if by == "cleanup_stale":
        # only this owner's: a test running beside this one may have left a killed owner's nodes for a moment too
        removed = [n for n in nodes.cleanup_stale() if n.startswith(f"dsbx-{owner.pid}-")]
        assert sorted(removed) == sorted(x.split()[1] for x in left if x.startswith("netns "))
    else:
        with nodes.Cluster(nnodes=1):
            pass
    assert nodes.leftovers(owner.pid) == []
    assert still_running([sleeper]) == []


def test_cleanup_stale_spares_a_living_owner():
    with nodes.Cluster(nnodes=1) as c:
        assert not [n for n in nodes.cleanup_stale() if n.startswith(f"dsbx-{os.getpid()}-")]
        assert f"netns {c.switch}" in nodes.leftovers(os.getpid())
        assert in_node(c.node(0), "import socket; print(socket.gethostname())") == "node0"


def test_two_clusters_at_once_do_not_collide(clean):
    with nodes.Cluster(nnodes=2) as a, nodes.Cluster(nnodes=2) as b:
        assert a.slot != b.slot and a.subnet != b.subnet
        assert not set(a.names()) & set(b.names())
        # each cluster's node1 is reachable from its own node0, and only its own
        probe = "import socket; print(socket.gethostbyname('node1'))"
        assert in_node(a.node(0), probe) == a.node(1).address
        assert in_node(b.node(0), probe) == b.node(1).address
        got = in_node(a.node(0), "import socket\ntry:\n    socket.create_connection(('%s', 9), timeout=2)\n"
                                 "except OSError as e:\n    print(e.errno)" % b.node(1).address)
        assert int(got) == errno.ENETUNREACH
    assert nodes.leftovers(os.getpid()) == []


def test_the_slot_lock_is_taken_every_time_and_waited_on_for_a_bounded_time(tmp_path):
    """A cluster starting takes the machine's lock each time (a second cluster of the same process included) and
    gives up after its wait in one sentence; libc is loaded once, before any fork, for the children's setns."""
    import fcntl

    assert nodes._libc() is nodes._libc()
    first = os.open(tmp_path, os.O_RDONLY)
    nodes._flock(first, 0.2)
    os.close(first)  # released
    holder = os.open(tmp_path, os.O_RDONLY)
    fcntl.flock(holder, fcntl.LOCK_EX)  # another cluster picking its slot
    again = os.open(tmp_path, os.O_RDONLY)
    try:
        with pytest.raises(RuntimeError, match="another cluster held .* lock for 0.2 s"):
            nodes._flock(again, 0.2)
    finally:
        os.close(again)
        os.close(holder)


def test_a_cluster_needs_at_least_one_node():
    with pytest.raises(ValueError, match="between 1 and 254"):
        nodes.Cluster(nnodes=0)


@pytest.mark.parametrize("setup, needs", [("import os; os.geteuid = lambda: 1000", "root"),
                                          ("import os; os.environ['PATH'] = '/nonexistent'", "`ip` command")])
def test_available_says_what_is_needed(setup, needs):
    code = f"{setup}\nfrom sandbox import nodes\nok, why = nodes.available()\nprint(ok, why)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=T, cwd=ROOT,
                         env=dict(os.environ, PYTHONPATH=ROOT)).stdout
    assert out.startswith("False simulated nodes need ") and needs in out and out.strip().endswith(".")


def test_threads_that_ask_at_once_get_one_answer():
    """The docs build asks from several threads at once: each thread's first question must not race the others'
    probe (the same namespace name added twice reads "File exists", which is not "namespaces do not work here")."""
    import threading

    from sandbox import netns

    answers, start = [], threading.Barrier(8)

    def ask():
        start.wait(timeout=T)
        answers.append(nodes.available())

    netns._available.cache_clear()  # the first question of a process, asked by eight threads at once
    threads = [threading.Thread(target=ask) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=T)
    assert answers == [(True, "")] * 8
