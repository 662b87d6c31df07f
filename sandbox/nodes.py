"""Simulated nodes: each a Linux network namespace with its own hostname, address and loopback, all plugged into one
bridge that lives in a "switch" namespace of its own. Needs root; everything goes through the `ip` command and a few
syscalls (Python 3.11 has no os.setns). Imports no torch; the machine-side bookkeeping (names, leftovers, cleanup,
whether namespaces work here) is `sandbox.netns`'s, re-exported here.

Why this shape:
- Nothing is created in the machine's own namespace, not even for a moment: veth pairs are made inside the switch
  namespace with their far end born in the node's, the bridge has no address and no node a default route. A node
  reaches the other nodes and its loopback; a connect anywhere else fails at once (ENETUNREACH), sending nothing.
- Names carry a prefix, the owner's pid and a slot: `dsbx-<pid>-<slot>-sw`, `dsbx-<pid>-<slot>-n<i>`. The pid says
  whose leftovers they are (a launcher killed with SIGKILL cannot clean up: the next Cluster removes what ended
  owners left); the slot, unique on the machine while its cluster lives, picks the subnet 10.213.<slot>.0/24.
- Names resolve through /etc/netns/<netns>/hosts, the file `ip netns exec` bind-mounts over /etc/hosts: kept, so a
  person debugging by hand (`ip netns exec dsbx-...-n0 bash`) sees what the ranks see; `Node.enter()` makes the
  same bind-mount itself, in a new mount namespace per process, so it never shows outside.
- `Node.popen` enters the node in the child between fork and exec: no extra program starts (a run starts many
  processes). `Node.wrap` does it with programs (`ip netns exec`, `unshare --uts`, `hostname`), for a caller with
  threads, where Python warns that preexec_fn may deadlock.
"""
from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass

from sandbox import netns as ns
from sandbox.topology import hostname
from sandbox.netns import available, cleanup_stale, leftovers  # noqa: F401  (re-exported: the nodes' API)

log = logging.getLogger("sandbox.nodes")

SUBNET = "10.213.{slot}.0/24"
MAX_SLOTS = 256
LOCK_WAIT_S = 60.0  # how long a cluster starting waits for another one to pick its slot

_CLONE_NEWNET, _CLONE_NEWUTS, _CLONE_NEWNS = 0x40000000, 0x04000000, 0x00020000
_MS_BIND, _MS_REC, _MS_SLAVE, _MNT_DETACH = 0x1000, 0x4000, 1 << 19, 2


def _flock(fd: int, wait_s: float) -> None:
    """An exclusive flock on fd, waiting at most wait_s (its holders only pick a slot and add namespaces)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"another cluster held {ns.ETC_DIR}'s lock for {wait_s:g} s") from None
            time.sleep(0.05)


@functools.cache  # loaded once in the parent, so a child between fork and exec only calls into it
def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        raise OSError(ctypes.get_errno(), f"{what}: {os.strerror(ctypes.get_errno())}")


@dataclass(frozen=True, kw_only=True)
class Node:
    index: int
    hostname: str  # what socket.gethostname() says inside (`sandbox.topology.hostname`)
    address: str   # on the cluster's bridge; the hostname resolves to it on every node
    netns: str     # the namespace's name, as `ip netns list` shows it

    @property
    def hosts_path(self) -> str:
        return f"{ns.ETC_DIR}/{self.netns}/hosts"

    def enter(self) -> None:
        """Move the calling process into this node: its network namespace, a new UTS namespace named `hostname`,
        and a new mount namespace where /etc/hosts is the node's and /sys shows the node's interfaces (as
        `ip netns exec` does). Only for a single-threaded process that will not go back (a fresh child: unshare of
        the mount namespace fails where threads share the filesystem context)."""
        libc = _libc()
        fd = os.open(f"{ns.RUN_DIR}/{self.netns}", os.O_RDONLY)
        try:
            _check(libc.setns(fd, _CLONE_NEWNET), f"setns {self.netns}")
        finally:
            os.close(fd)
        _check(libc.unshare(_CLONE_NEWUTS | _CLONE_NEWNS), "unshare")
        name = self.hostname.encode()
        _check(libc.sethostname(name, len(name)), "sethostname")
        # Mounts made below must not propagate back to the machine's mount namespace.
        _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_SLAVE, None), "mount --make-rslave /")
        _check(libc.mount(self.hosts_path.encode(), b"/etc/hosts", None, _MS_BIND, None), "bind /etc/hosts")
        _check(libc.umount2(b"/sys", _MNT_DETACH), "umount /sys")
        _check(libc.mount(self.netns.encode(), b"/sys", b"sysfs", 0, None), "mount sysfs")

    @contextlib.contextmanager
    def net_inside(self):
        """The calling thread in this node's network namespace for the block, then back: a socket made inside
        stays in the node (so a process outside can host something there, as the zygote hosts the store on
        node0), and a thread started inside starts there. Works in a process with threads (setns of a network
        namespace is per thread)."""
        libc = _libc()
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        try:
            fd = os.open(f"{ns.RUN_DIR}/{self.netns}", os.O_RDONLY)
            try:
                _check(libc.setns(fd, _CLONE_NEWNET), f"setns {self.netns}")
            finally:
                os.close(fd)
            try:
                yield self
            finally:
                _check(libc.setns(home, _CLONE_NEWNET), "setns back to the machine's network namespace")
        finally:
            os.close(home)

    def popen(self, argv: list[str], **kw) -> subprocess.Popen:
        """subprocess.Popen(argv, **kw) with the child inside this node (see `enter`); a caller's own preexec_fn
        runs after, already inside. Not for a caller with threads (use `wrap`)."""
        theirs = kw.pop("preexec_fn", None)

        def inside():
            self.enter()
            if theirs is not None:
                theirs()
        _libc()
        return subprocess.Popen(argv, preexec_fn=inside, **kw)

    def wrap(self, argv: list[str]) -> list[str]:
        """argv that runs `argv` inside this node through programs only (`ip netns exec` does the namespace, the
        hosts file and /sys; `unshare --uts` and `hostname` the name): four more execs than `popen`, no preexec_fn."""
        return ["ip", "netns", "exec", self.netns, "unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"',
                self.hostname, *argv]


class Cluster:
    """`with Cluster(nnodes=K) as c:` K nodes on a private bridge, gone again when the block ends however it ends
    (a caller turns SIGTERM into an exception or a normal exit so that __exit__ runs; a SIGKILLed owner's
    leftovers go at the next Cluster's start, or with `cleanup_stale()`)."""

    def __init__(self, *, nnodes: int, owner_pid: int | None = None, hostname_loopback: bool = False,
                 cap: str | None = None):
        """hostname_loopback: each node's hosts file also maps its own hostname to 127.0.1.1, first, as Debian's
        installer writes /etc/hosts (so the node resolves its own name to a loopback address: what makes gloo
        bind the loopback). cap: a rate (tc's words: "100mbit", "1gbit") every node's link is capped to, both
        ways, from the start (`cap_link` changes it later)."""
        if not 1 <= nnodes <= 254:
            raise ValueError(f"nnodes must be between 1 and 254 (one /24 subnet), not {nnodes}")
        if cap is not None:
            tbf_args(cap)  # a bad rate is one sentence before anything is made
        self.nnodes = nnodes
        self.hostname_loopback = hostname_loopback
        self.cap = cap
        self.owner_pid = os.getpid() if owner_pid is None else owner_pid
        self.slot: int | None = None
        self.nodes: list[Node] = []

    @property
    def subnet(self) -> str:
        return SUBNET.format(slot=self.slot)

    @property
    def switch(self) -> str:
        return f"{ns.PREFIX}-{self.owner_pid}-{self.slot}-sw"

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def names(self) -> list[str]:
        """This cluster's namespaces, nodes first (a node's veth goes with it, then the bridge with the switch)."""
        return [n.netns for n in self.nodes] + ([self.switch] if self.slot is not None else [])

    def __enter__(self) -> Cluster:
        t0 = time.monotonic()
        os.makedirs(ns.ETC_DIR, exist_ok=True)
        # One lock for the whole machine around "which slot is free" and taking it, so two clusters starting at
        # once cannot pick the same one; flock ends with its holder, so a killed one never leaves it held. Not on
        # /run/netns: `ip netns add` flocks that folder itself, and would wait for us forever.
        lock = os.open(ns.ETC_DIR, os.O_RDONLY)
        try:
            _flock(lock, LOCK_WAIT_S)
            cleanup_stale()
            used = {int(n.split("-")[2]) for n in ns.ours(ns.RUN_DIR)
                    if re.match(rf"^{ns.PREFIX}-\d+-\d+-", n)}
            self.slot = min(set(range(MAX_SLOTS)) - used, default=None)
            if self.slot is None:
                raise RuntimeError(f"all {MAX_SLOTS} cluster subnets are in use; see `ip netns list`")
            base = self.subnet.rsplit(".", 1)[0]
            self.nodes = [Node(index=i, hostname=hostname(i), address=f"{base}.{i + 1}",
                               netns=f"{ns.PREFIX}-{self.owner_pid}-{self.slot}-n{i}") for i in range(self.nnodes)]
            ns.ip(batch=[f"netns add {name}" for name in self.names()])  # from here on the names hold the slot
            os.close(lock)
            lock = None
            self._build()
        except BaseException:
            self.close()  # some of it may exist: `-force` goes on past a failing line
            raise
        finally:
            if lock is not None:
                os.close(lock)
        log.info("cluster %s: %d nodes on %s in %.3f s", self.switch, self.nnodes, self.subnet, time.monotonic() - t0)
        return self

    def _build(self) -> None:
        # Each node also under its IPv4-mapped IPv6 form, last (lookups by name still give the IPv4 address
        # first): torch's store listens dual-stack, sees its peers as ::ffff:a.b.c.d, and looks that name up;
        # without the line every rank logs "[c10d] The hostname of the client socket cannot be retrieved".
        cluster = "".join(f"{n.address} {n.hostname}\n" for n in self.nodes) + "".join(
            f"::ffff:{n.address} {n.hostname}\n" for n in self.nodes)
        for n in self.nodes:
            os.makedirs(os.path.dirname(n.hosts_path), exist_ok=True)
            own = f"127.0.1.1 {n.hostname}\n" if self.hostname_loopback else ""  # first line wins a lookup
            with open(n.hosts_path, "w") as f:
                f.write(f"127.0.0.1 localhost\n{own}::1 localhost ip6-localhost ip6-loopback\n{cluster}")
        # addrgenmode none: no IPv6 link-local addresses (nor their duplicate-address probing) on our links; the
        # nodes talk IPv4 by name, and nothing should chatter on the bridge that a rank did not send.
        sw = ["link add br0 type bridge forward_delay 0", "link set br0 addrgenmode none"]
        for n in self.nodes:
            sw += [f"link add v{n.index} type veth peer name eth0 netns {n.netns}",
                   f"link set v{n.index} addrgenmode none", f"link set v{n.index} master br0 up"]
        ns.ip("-n", self.switch, batch=sw + ["link set br0 up"])
        for n in self.nodes:  # `-batch` lines cannot name a namespace: one `ip` per node
            ns.ip("-n", n.netns, batch=["link set lo up", "link set eth0 addrgenmode none",
                                      f"addr add {n.address}/24 dev eth0", "link set eth0 up"])
        if self.cap is not None:
            for n in self.nodes:
                self.cap_link(n.index, self.cap)

    # Faults, injected from outside the node as a real one would strike: the processes do not take part.

    def kill_node(self, i: int) -> list[int]:
        """SIGKILL every process inside node i (a power cut, as its peers see it); returns their pids. The node
        itself (namespace, address, link) stays, as a machine that reboots keeps its name and address."""
        inode = os.stat(f"{ns.RUN_DIR}/{self.nodes[i].netns}").st_ino
        killed: list[int] = []
        deadline = time.monotonic() + ns.DIE_WAIT_S
        # again until none is left: a process forked after a pass (an agent starting its workers) escaped it
        while (pids := [p for p in ns.pids_in({inode}) if p not in killed]) and time.monotonic() < deadline:
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):  # it ended on its own meanwhile
                    os.kill(pid, signal.SIGKILL)
            killed += pids
        return killed

    def set_link(self, i: int, up: bool) -> None:
        """Take node i's link down (a pulled cable: the switch port goes down, so does the node's carrier; TCP
        connections over it stall rather than break, as on a real network) or bring it back up."""
        ns.ip("-n", self.switch, "link", "set", f"v{i}", "up" if up else "down")

    def cap_link(self, i: int, rate: str | None) -> None:
        """Cap node i's link to `rate` both ways with a token bucket (tc's tbf: the kernel here has no netem, so
        no delay or loss), or remove the cap with None."""
        for where, dev in ((self.nodes[i].netns, "eth0"), (self.switch, f"v{i}")):  # out of the node, into it
            argv = ["tc", "-n", where, "qdisc"] + (["replace", "dev", dev, "root", "tbf", *tbf_args(rate)]
                                                 if rate is not None else ["del", "dev", dev, "root"])
            p = subprocess.run(argv, capture_output=True, text=True, timeout=ns.IP_TIMEOUT_S)
            if p.returncode != 0 and rate is not None:  # removing a cap that is not there is not a failure
                raise RuntimeError(f"`{' '.join(argv)}` failed: {(p.stderr or p.stdout).strip()}")

    def close(self) -> list[str]:
        """Remove everything of this cluster (idempotent, bounded); returns what could not be removed."""
        t0, names, self.nodes, self.slot = time.monotonic(), self.names(), [], None
        left = ns.remove(names)
        for what in left:
            log.warning("cluster teardown left %s", what)
        log.info("cluster %s removed in %.3f s", names[-1] if names else "?", time.monotonic() - t0)
        return left

    def __exit__(self, *exc) -> None:
        self.close()


_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_BITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bytes_per_s(rate: str) -> float:
    """A link rate in tc's words ("100mbit", "1gbit") in bytes per second. ValueError in one sentence otherwise."""
    m = _RATE.match(rate.strip().lower())
    if m is None or float(m.group(1)) <= 0:
        raise ValueError(f"a link rate is a number and a unit (bit, kbit, mbit or gbit), such as 100mbit, "
                         f"not {rate!r}.")
    return float(m.group(1)) * _BITS[m.group(2)] / 8


def tbf_args(rate: str) -> list[str]:
    """tc's tbf arguments for a rate such as "100mbit": a bucket of 10 ms of traffic (at least 64 KiB, a full TSO
    segment, so big sends are not dropped whole), 50 ms of queue. ValueError in one sentence for a bad rate."""
    bytes_per_s = rate_bytes_per_s(rate)
    return ["rate", rate.strip().lower(), "burst", str(max(65536, int(bytes_per_s / 100))), "latency", "50ms"]
