"""A warm zygote: torch imported once, then a child forked per run that becomes that run's zygote."""
from __future__ import annotations

import json
import os
import select
import signal
import socket
from multiprocessing.connection import Connection

from sandbox import defaults
from sandbox._proc import die_with_parent, report_failure
from sandbox._zygote import common
from sandbox._zygote.common import SIBLINGS, WARM_CHILDREN, WARM_SIBLINGS, ending, pid_alive, run_environment
from sandbox._zygote.run import run
from sandbox._zygote.siblings import start_siblings


def end_warm(signum=None, frame=None) -> None:
    """The warm zygote's end (its launcher died, or closed the control socket): end every run it started."""
    for pid in list(WARM_CHILDREN):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # that run already ended
            pass
    os._exit(0)


def serve(control: socket.socket) -> None:
    """Fork one run-zygote per request, from this process's warm state (torch imported, tracer installed).

    A request is one JSON line {"spec": path, "cwd": dir, "environ": {...}, "log": path, "launcher": pid} with one
    file descriptor attached (SCM_RIGHTS): the run's own pipe to the launcher, and "preload": true when the run's
    code needs the preload. The reply is {"pid": P}: P leads the run's process group. Closing the control socket ends
    the warm zygote and every run it started. {"share": true} with a listening socket attached (`sandbox.warm.share`)
    serves other processes' launchers too: each connects there and asks as above; their runs end with them."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # runs are reaped by the kernel: no zombies to collect
    idle = common.IdleWork()  # the preload, the runs' libraries, huge pages: between requests
    listener: socket.socket | None = None
    others: list[socket.socket] = []  # the other launchers' connections, accepted on `listener`
    while True:
        asking = [control, *([listener] if listener else []), *others]
        idle.do(lambda: bool(select.select(asking, [], [], 0)[0]))
        try:
            ready = select.select(asking, [], [])[0]
        except InterruptedError:  # a signal; select is retried
            continue
        for sock in ready:
            if sock is listener:
                others.append(listener.accept()[0])
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 65536, 4)
            except InterruptedError:  # a signal: the request stays queued for the next round
                continue
            except OSError:  # another launcher's connection broke: as closed
                msg, fds = b"", []
            if not msg:
                if sock is control:
                    end_warm()
                others.remove(sock)  # another launcher is done: its runs end by themselves (they watch it)
                sock.close()
                continue
            req = json.loads(msg)
            if req.get("share"):
                if listener is None:
                    listener = socket.socket(fileno=fds.pop(0))
                for fd in fds:  # asked twice: the first listener serves
                    os.close(fd)
                sock.sendall(b'{"pid": 0}\n')
                continue
            idle.asked(req)
            fork_run(req, fds, sock, [control, *([listener] if listener else []), *others])


def fork_run(req: dict, fds: list[int], reply: socket.socket, ours: list[socket.socket]) -> None:
    """Fork the run-zygote of `req` (its pipe to the launcher: fds[0]), each warm sibling its sibling; reply its pid."""
    seeds = max(1, int(req["environ"].get(defaults.HASH_SEEDS_ENV, "1")))
    if seeds - 1 > len(WARM_SIBLINGS):  # more seeds than it has siblings (its process chose fewer): more, for good
        WARM_SIBLINGS.extend(start_siblings(seeds - 1 - len(WARM_SIBLINGS), warm=True))
    pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(seeds - 1)]
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, 0)
            for sock in ours:
                sock.close()
            for sib in WARM_SIBLINGS:
                sib.close()
            SIBLINGS[:] = [Connection(mine.detach()) for mine, theirs in pairs]
            for _, theirs in pairs:
                theirs.close()
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this run waits for its own ranks
            become_run(req, fds[0], parent=os.getppid())
        except BaseException:  # noqa: BLE001  the run could not start: its log says why, the launcher sees EOF
            report_failure("the run could not start:")
        finally:
            os._exit(0)
    try:
        os.setpgid(pid, pid)  # both sides set it, so the launcher can end the group whichever ran first
    except (PermissionError, ProcessLookupError):  # the child already did it (or already ended)
        pass
    for fd in fds:
        os.close(fd)
    for sib, (mine, theirs) in zip(WARM_SIBLINGS, pairs):  # each warm sibling forks this run's sibling
        try:
            socket.send_fds(sib, [json.dumps({**req, "z1": pid}).encode()], [theirs.fileno()])
        except OSError:  # that warm sibling is gone: the run's zygote sees EOF and reports its ranks lost
            pass
        mine.close()
        theirs.close()
    WARM_CHILDREN.add(pid)
    WARM_CHILDREN.intersection_update(p for p in WARM_CHILDREN if pid_alive(p))
    reply.sendall((json.dumps({"pid": pid}) + "\n").encode())


def become_run(req: dict, channel_fd: int, parent: int) -> None:
    """In a child of the warm zygote: become the zygote of one run, as a cold one would be."""
    common.PROTO_FD = channel_fd
    run_environment(req)
    signal.signal(signal.SIGTERM, ending(os.environ.get("SANDBOX_RUN_DIR"),
                                          os.environ.get("SANDBOX_OWNS_DIR") == "1"))
    die_with_parent(signal.SIGTERM, parent)  # the warm zygote gone: end this run too
    run(req["spec"], parent, launcher=req.get("launcher"))  # and so does its launcher's end
