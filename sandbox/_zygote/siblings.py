"""Sibling zygotes, one per further string-hash seed: each imports torch under its own seed and forks the ranks a run
deals it, as torchrun's workers each draw their own seed."""
from __future__ import annotations

import json
import os
import pickle
import select
import signal
import socket
import sys
from multiprocessing.connection import Connection

from sandbox import defaults
from sandbox._proc import EARLY_EXIT, die_with_parent, report_failure
from sandbox._zygote.common import IdleWork, import_shared, pid_alive, run_environment
from sandbox._zygote.run import fork_ranks, prepare, reap
from sandbox.nodes import Node


def start_siblings(count: int, warm: bool) -> list:
    """Start `count` sibling zygotes: new interpreters, each with its own PYTHONHASHSEED, in this process's group,
    dying with it. Forked ranks share their zygote's string-hash seed, where torchrun's workers each draw their own
    (a set of strings iterates in another order on every rank): a run's ranks are dealt among its zygotes
    (`defaults.HASH_SEEDS`). A run's siblings talk to it over a stream socket (framed pickles); a warm zygote's over
    a packet socket, one request with one descriptor each, like its own control socket."""
    out: list = []
    listed = [int(x) for x in os.environ.get(defaults.HASH_SEED_LIST_ENV, "").split(",")[1:] if x.isdigit()]
    for i in range(count):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET if warm else socket.SOCK_STREAM)
        # an explored schedule's seed, else one of its own (from 1: 0 would turn the randomisation off)
        seed = listed[i] if i < len(listed) else 1 + int.from_bytes(os.urandom(4), "little") % (2**32 - 1)
        env = {k: v for k, v in os.environ.items() if k not in ("SANDBOX_CONTROL_FD", "SANDBOX_SPEC")}
        env.update(PYTHONHASHSEED=str(seed), SANDBOX_SIBLING_FD=str(theirs.fileno()),
                   SANDBOX_SIBLING_OF=str(os.getpid()))
        os.set_inheritable(theirs.fileno(), True)
        os.posix_spawn(sys.executable, [sys.executable, "-m", "sandbox._zygote",
                                        "--warm-sibling" if warm else "--sibling"], env)
        theirs.close()
        out.append(ours if warm else Connection(ours.detach()))
    return out


def sibling_main(warm: bool) -> None:
    """A sibling zygote: torch imported under its own hash seed; then it forks the ranks a run deals it (`--sibling`,
    one run) or, warm, a run's sibling per request of its warm zygote (`--warm-sibling`)."""
    parent = int(os.environ.pop("SANDBOX_SIBLING_OF"))
    fd = int(os.environ.pop("SANDBOX_SIBLING_FD"))
    os.environ.pop("PYTHONHASHSEED", None)  # read at start; the ranks' environment is the run's, as the first's
    die_with_parent(signal.SIGKILL, parent)  # its ranks die with it (theirs is SIGKILL too)
    import_shared()  # this seed's one import of torch
    if warm:
        serve_siblings(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd))
    else:
        sibling_run(Connection(fd), alive=lambda: os.getppid() == parent)


def serve_siblings(control: socket.socket) -> None:
    """A warm sibling: per request {"z1": pid, "environ", "cwd", "log"} with the run's socket attached, fork the
    run's sibling into the run's process group (pid z1, which the launcher ends with the run)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = os.getpid()
    idle = IdleWork()  # as its warm zygote's
    while True:
        idle.do(lambda: bool(select.select([control], [], [], 0)[0]))
        try:
            msg, fds, _, _ = socket.recv_fds(control, 65536, 1)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        req = json.loads(msg)
        idle.asked(req)
        if os.fork() == 0:
            try:
                os.setpgid(0, req["z1"])
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                run_environment(req)
                die_with_parent(signal.SIGKILL, me)
                sibling_run(Connection(fds[0]), alive=lambda: pid_alive(req["z1"]) and os.getppid() == me)
            except BaseException:  # noqa: BLE001  the run's zygote reports this sibling's ranks as lost
                report_failure("a sibling zygote could not start:")
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)


def sibling_run(conn: Connection, alive) -> None:
    """One run's sibling: receive {"spec": bytes, "port", "ranks"} from the run's zygote, import the run's code under
    this seed, fork those ranks, and tell ("rank", r, pid), ("exit", r, code) and ("done",)."""
    try:
        req = pickle.loads(conn.recv_bytes())
    except (EOFError, OSError):  # the run ended before it needed us
        return

    def tell(*msg) -> None:
        conn.send_bytes(pickle.dumps(msg))
    spec = pickle.loads(req["spec"])
    try:
        prepare(spec)
    except BaseException:  # noqa: BLE001  the run's zygote imported it: this is rare; the ranks say they could not start
        report_failure("a sibling zygote could not import the run's code:")
        for r in req["ranks"]:
            tell("exit", r, EARLY_EXIT)
        tell("done")
        return
    nodes = [Node(**n) for n in spec.get("nodes") or ()]
    pids = fork_ranks(spec, req["ranks"], req["port"], nodes, (conn.fileno(),), lambda r, pid: tell("rank", r, pid))
    reap(pids, lambda r, code: tell("exit", r, code), alive, orphaned=lambda: os._exit(1))
    tell("done")
