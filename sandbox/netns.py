"""The machine's side of simulated nodes (`sandbox.nodes`): the names they carry, running `ip`, what of ours exists,
removing what ended owners left, and whether namespaces can be made here at all. Needs nothing of the sandbox's and
no torch; `sandbox.nodes` re-exports `leftovers`, `cleanup_stale` and `available`.
"""
from __future__ import annotations

import functools
import logging
import os
import re
import shutil
import signal
import subprocess
import threading
import time

from sandbox._proc import alive

log = logging.getLogger("sandbox.nodes")

PREFIX = "dsbx"
RUN_DIR = "/run/netns"  # where `ip netns add` pins a namespace (a bind mount of it)
ETC_DIR = "/etc/netns"  # where `ip netns exec` finds per-namespace /etc files
IP_TIMEOUT_S = 10.0  # one `ip` command; they take milliseconds, this only bounds a stuck one
DIE_WAIT_S = 2.0     # processes killed in a namespace must be gone within this, or they are reported
OURS = re.compile(rf"^{PREFIX}-(\d+)-")


def ip(*args: str, batch: list[str] | None = None) -> None:
    """Run `ip args` (with `-batch -` fed `batch` lines when given), bounded; raise with ip's own words on failure."""
    argv = ["ip", *args] + (["-force", "-batch", "-"] if batch is not None else [])
    p = subprocess.run(argv, input="\n".join(batch or []) + "\n", capture_output=True, text=True, timeout=IP_TIMEOUT_S)
    if p.returncode != 0:
        raise RuntimeError(f"`{' '.join(argv)}` failed: {(p.stderr or p.stdout).strip()}")


def ours(folder: str) -> list[str]:
    """Names in `folder` that carry our prefix and an owner pid."""
    try:
        return sorted(n for n in os.listdir(folder) if OURS.match(n))
    except FileNotFoundError:  # nothing was ever put there on this machine
        return []


def pids_in(inodes: set[int]) -> list[int]:
    """Processes whose network namespace is one of `inodes` (what `ip netns pids` does, for many at once)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                if os.stat(f"/proc/{d}/ns/net").st_ino in inodes:
                    found.append(int(d))
            except OSError:  # it ended meanwhile, or is a zombie (whose namespaces are already released)
                pass
    return found


def remove(names: list[str]) -> list[str]:
    """End the processes still inside these namespaces (they would keep a namespace alive after its name is gone),
    remove the names and the hosts folders. Bounded; returns what is left."""
    inodes = set()
    for ns in names:
        try:
            inodes.add(os.stat(f"{RUN_DIR}/{ns}").st_ino)
        except OSError:  # never created, or already removed
            pass
    left = []
    if inodes:
        pids = pids_in(inodes)
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:  # it ended on its own meanwhile
                pass
        deadline = time.monotonic() + DIE_WAIT_S
        while pids and time.monotonic() < deadline:
            time.sleep(0.01)
            pids = pids_in(inodes)
        left += [f"process {pid} inside a namespace of ours" for pid in pids]
        try:
            ip(batch=[f"netns del {ns}" for ns in names if os.path.exists(f"{RUN_DIR}/{ns}")])
        except (RuntimeError, subprocess.TimeoutExpired) as e:  # reported below as the names still there
            log.warning("%s", e)
    left += [f"netns {ns}" for ns in names if os.path.exists(f"{RUN_DIR}/{ns}")]
    for ns in names:
        shutil.rmtree(f"{ETC_DIR}/{ns}", ignore_errors=True)  # what remains is reported on the next line
    left += [f"dir {ETC_DIR}/{ns}" for ns in names if os.path.exists(f"{ETC_DIR}/{ns}")]
    return left


def leftovers(owner_pid: int | None = None) -> list[str]:
    """What of ours exists now (of one owner, or of all): named namespaces (the interfaces, veths and bridges live
    inside them and go with them), the mounts that pin them, and /etc/netns folders."""
    def mine(name: str) -> bool:
        return owner_pid is None or int(OURS.match(name).group(1)) == owner_pid
    out = [f"netns {n}" for n in ours(RUN_DIR) if mine(n)] + [f"dir {ETC_DIR}/{n}" for n in ours(ETC_DIR) if mine(n)]
    with open("/proc/self/mountinfo") as f:
        points = [line.split()[4] for line in f]
    return out + [f"mount {p}" for p in points if os.path.dirname(p) == RUN_DIR and OURS.match(os.path.basename(p))
                  and mine(os.path.basename(p))]


def cleanup_stale() -> list[str]:
    """Remove what clusters of owners that no longer exist left behind; returns the names removed."""
    found = ours(RUN_DIR) + ours(ETC_DIR)
    dead = {pid for pid in {int(OURS.match(n).group(1)) for n in found} if not alive(pid)}
    names = sorted({n for n in found if int(OURS.match(n).group(1)) in dead}, key=lambda n: n.endswith("-sw"))
    if names:  # nodes first, switches last, as a cluster removes its own
        log.info("removing leftovers of ended owners %s: %s", sorted(dead), names)
        for what in remove(names):
            log.warning("stale cleanup left %s", what)
    return names


_probing = threading.Lock()


def available() -> tuple[bool, str]:
    """(True, "") where simulated nodes can be made here, else (False, one sentence saying what is needed). One
    probe at a time: two threads of a process (the docs build's pages) would add the same probe namespace, and the
    second would read "File exists" as namespaces not working."""
    with _probing:
        return _available()


@functools.cache  # a probe costs two `ip` runs; the answer does not change while a process lives
def _available() -> tuple[bool, str]:
    if not os.path.isdir("/proc/self/ns"):
        return False, "simulated nodes need Linux network namespaces."
    if os.geteuid() != 0:
        return False, "simulated nodes need root (network namespaces and a bridge): run as root, e.g. in a container."
    if shutil.which("ip") is None:
        return False, "simulated nodes need the `ip` command (iproute2): install it, e.g. `apt-get install iproute2`."
    probe = f"{PREFIX}-{os.getpid()}-probe"  # named like the rest, so a probe cut short is cleaned as stale
    try:
        ip("netns", "add", probe)
        ip("netns", "del", probe)
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:
        return False, f"simulated nodes need `ip netns add` to work, and here it does not ({e})."
    return True, ""
