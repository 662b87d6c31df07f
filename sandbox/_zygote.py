"""The zygote: one process that imports torch once, then forks every rank of a run from that warm state.

It is started by `sandbox.launcher` with its own session (so the whole run is one process group the parent can end
with one signal), reads the run's spec from the file named by SANDBOX_SPEC (then deletes it), forks the ranks,
hosts the rendezvous store on a socket bound to 127.0.0.1 (like torchrun's agent store), and reports each rank's
pid and exit status on stdout as JSON lines. A rank that fails before its user code runs exits with code 70, its
traceback in its log (or in the zygote's stderr, `zygote.log`, if the log could not be opened).
If the parent dies, the kernel sends the zygote SIGTERM (PR_SET_PDEATHSIG); it then ends its ranks and removes
the run's directory, so nothing is left behind. Ranks die with the zygote the same way.

A warm zygote (`--warm`, one per launching process, e.g. a Jupyter kernel) imports torch once and then serves many
runs: for each it forks a child that becomes that run's zygote, in its own process group, so a second run costs a
fork instead of an import, and runs share nothing (fresh ranks, fresh store, the user's modules imported after the
fork). It dies with its launcher, and its runs die with it.

What training scripts import lazily (`torch._dynamo`) is imported here once, before the fork, when the run's code
needs it, rather than by every rank on its own: `sandbox.preload` says what, when, and why.
"""
from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import signal
import socket
import sys
import threading
from multiprocessing.connection import Connection

from sandbox import defaults, preload
from sandbox._proc import EARLY_EXIT, die_with_parent, kill_group_but_me, remove_dir, report_failure
from sandbox.nodes import Node

PROTO_FD = 1  # the pipe (or socket) to the parent; moved off fd 1 so stray prints cannot corrupt it
ORPHAN_CHECK_S = 0.25  # how often a zygote waiting for its ranks checks that its launcher is still alive
WARM_CHILDREN: set[int] = set()  # a warm zygote's live runs (each one the leader of its own process group)
RANKS: dict[int, int] = {}  # a run's zygote: pid -> rank of the ranks it forked and has not reaped
SIBLINGS: list[Connection] = []  # a run's zygote: its siblings, each forking the ranks of another hash seed
WARM_SIBLINGS: list[socket.socket] = []  # a warm zygote's: warm siblings, each forking a run's sibling on request

def say(**msg) -> None:
    os.write(PROTO_FD, (json.dumps(msg) + "\n").encode())


@contextlib.contextmanager
def _signals_to_main_thread():
    """Threads started inside (torch's, the store's) inherit a signal mask without SIGTERM, so the kernel delivers
    SIGTERM to the main thread: the one that runs Python's handlers, and the one blocked in os.wait(). Delivered to
    another thread, it would wait there unseen until a rank exits, and an orphaned run would live on."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _ending(run_dir: str | None, owns_dir: bool):
    def orphaned(signum, frame):  # the parent is gone: clean up after it, then end the whole process group
        for pid in list(RANKS):  # first the ranks, so none creates a file in the run directory while it is removed
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)  # SIGKILL cannot be refused: this returns at once
            except (ProcessLookupError, ChildProcessError):  # that rank had already ended and been reaped
                pass
        kill_group_but_me()  # the siblings and their ranks: they would go on writing in the run directory
        if run_dir and owns_dir:
            remove_dir(run_dir)
        os.killpg(0, signal.SIGKILL)
    return orphaned


def main() -> None:
    global PROTO_FD
    warm = "--warm" in sys.argv[1:]
    parent = int(os.environ.get("SANDBOX_PARENT_PID", os.getppid()))
    if warm:
        control = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=int(os.environ["SANDBOX_CONTROL_FD"]))
        os.set_inheritable(control.fileno(), False)  # the siblings must not keep it open: closing it ends us
        signal.signal(signal.SIGTERM, _end_warm)
    else:
        PROTO_FD = os.dup(1)
        os.dup2(2, 1)  # whatever torch or the user's module prints at import goes to the zygote's log
        signal.signal(signal.SIGTERM, _ending(os.environ.get("SANDBOX_RUN_DIR"),
                                              os.environ.get("SANDBOX_OWNS_DIR") == "1"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if "--sibling" in sys.argv[1:] or "--warm-sibling" in sys.argv[1:]:
        return sibling_main(warm="--warm-sibling" in sys.argv[1:])
    # a warm zygote dies at once (SIGTERM waits while torch or the preload is imported with it masked, seconds under
    # load); each of its runs then ends itself on its own death signal, as a cold zygote does, its run dir removed
    die_with_parent(signal.SIGKILL if warm else signal.SIGTERM, parent)
    # before torch is imported here: the siblings import it beside this process, on the other cores
    seeds = int(os.environ.get(defaults.HASH_SEEDS_ENV, "1"))
    if warm:
        WARM_SIBLINGS[:] = _start_siblings(seeds - 1, warm=True)
    else:
        SIBLINGS[:] = _start_siblings(seeds - 1, warm=False)

    with _signals_to_main_thread():
        import torch  # noqa: F401  the one import of torch that every rank shares
        import torch.distributed  # noqa: F401

        from sandbox import trace

        trace.install()
    if warm:
        serve(control)
    else:
        run(os.environ["SANDBOX_SPEC"], parent)


# ----------------------------------------------------------------------------------------------- hash seeds

def _start_siblings(count: int, warm: bool) -> list:
    """Start `count` sibling zygotes: new interpreters, each with its own PYTHONHASHSEED, in this process's group,
    dying with it. Forked ranks share their zygote's string-hash seed, where torchrun's workers each draw their own
    (a set of strings iterates in another order on every rank): a run's ranks are dealt among its zygotes
    (`defaults.HASH_SEEDS`). A run's siblings talk to it over a stream socket (framed pickles); a warm zygote's over
    a packet socket, one request with one descriptor each, like its own control socket."""
    out: list = []
    for _ in range(count):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET if warm else socket.SOCK_STREAM)
        seed = 1 + int.from_bytes(os.urandom(4), "little") % (2**32 - 1)  # 0 would turn the randomisation off
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
    with _signals_to_main_thread():
        import torch  # noqa: F401  this seed's one import of torch
        import torch.distributed  # noqa: F401

        from sandbox import trace

        trace.install()
    if warm:
        _serve_siblings(socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET, fileno=fd))
    else:
        _sibling_run(Connection(fd), alive=lambda: os.getppid() == parent)


def _serve_siblings(control: socket.socket) -> None:
    """A warm sibling: per request {"z1": pid, "environ", "cwd", "log"} with the run's socket attached, fork the
    run's sibling into the run's process group (pid z1, which the launcher ends with the run)."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)
    me = os.getpid()
    served = False  # as its warm zygote: the preload waits until the first run is forked, which must not wait for it
    while True:
        if served and preload.wanted() and not preload.done() and not select.select([control], [], [], 0)[0]:
            with _signals_to_main_thread():
                preload.run()
        try:
            msg, fds, _, _ = socket.recv_fds(control, 65536, 1)
        except InterruptedError:
            continue
        if not msg:
            os._exit(0)
        req, served = json.loads(msg), True
        if os.fork() == 0:
            try:
                os.setpgid(0, req["z1"])
                control.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)
                _run_environment(req)
                die_with_parent(signal.SIGKILL, me)
                _sibling_run(Connection(fds[0]), alive=lambda: _alive(req["z1"]) and os.getppid() == me)
            except BaseException:  # noqa: BLE001  the run's zygote reports this sibling's ranks as lost
                report_failure("a sibling zygote could not start:")
            finally:
                os._exit(0)
        for fd in fds:
            os.close(fd)


def _sibling_run(conn: Connection, alive) -> None:
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
        _prepare(spec)
    except BaseException:  # noqa: BLE001  the run's zygote imported it: this is rare; the ranks say they could not start
        report_failure("a sibling zygote could not import the run's code:")
        for r in req["ranks"]:
            tell("exit", r, EARLY_EXIT)
        tell("done")
        return
    nodes = [Node(**n) for n in spec.get("nodes") or ()]
    pids = _fork_ranks(spec, req["ranks"], req["port"], nodes, (conn.fileno(),), lambda r, pid: tell("rank", r, pid))
    _reap(pids, lambda r, code: tell("exit", r, code), alive, orphaned=lambda: os._exit(1))
    tell("done")


def _relay(conn: Connection, ranks: list[int]) -> None:
    """In a run's zygote, a thread per sibling: what it tells, said on our pipe as our own ranks' news."""
    left = set(ranks)
    try:
        while True:
            msg = pickle.loads(conn.recv_bytes())
            if msg[0] == "rank":
                say(rank=msg[1], pid=msg[2])
            elif msg[0] == "exit":
                left.discard(msg[1])
                say(exit=msg[1], code=msg[2])
            elif msg[0] == "done":
                return
    except (EOFError, OSError):  # the sibling died: its ranks died with it (their death signal is SIGKILL)
        for r in sorted(left):
            say(exit=r, code=-signal.SIGKILL)


# ----------------------------------------------------------------------------------------------- a warm zygote

def _end_warm(signum=None, frame=None) -> None:
    """The warm zygote's end (its launcher died, or closed the control socket): end every run it started."""
    for pid in list(WARM_CHILDREN):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:  # that run already ended
            pass
    os._exit(0)


def serve(control: socket.socket) -> None:
    """Fork one run-zygote per request, from this process's warm state (torch imported, tracer installed).

    A request is one JSON line {"spec": path, "cwd": dir, "environ": {...}, "log": path} with one file descriptor
    attached (SCM_RIGHTS): the run's own pipe to the launcher. The reply is {"pid": P}: P leads the run's process
    group. Closing the control socket ends the warm zygote and every run it started."""
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # runs are reaped by the kernel: no zombies to collect
    while True:
        if preload.wanted() and not preload.done() and not select.select([control], [], [], 0)[0]:
            # idle (the first run, asked for at start, is already forked): later runs fork with it in place; as for
            # torch, a thread started inside must leave SIGTERM to the main thread
            with _signals_to_main_thread():
                preload.run()
        try:
            msg, fds, _, _ = socket.recv_fds(control, 65536, 4)
        except InterruptedError:  # a signal; recv_fds is retried
            continue
        if not msg:
            _end_warm()
        req = json.loads(msg)
        seeds = min(int(req["environ"].get(defaults.HASH_SEEDS_ENV, "1")), 1 + len(WARM_SIBLINGS))
        pairs = [socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(seeds - 1)]
        pid = os.fork()
        if pid == 0:
            try:
                os.setpgid(0, 0)
                control.close()
                for sib in WARM_SIBLINGS:
                    sib.close()
                SIBLINGS[:] = [Connection(ours.detach()) for ours, theirs in pairs]
                for _, theirs in pairs:
                    theirs.close()
                signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # this run waits for its own ranks
                _become_run(req, fds[0], parent=os.getppid())
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
        for sib, (ours, theirs) in zip(WARM_SIBLINGS, pairs):  # each warm sibling forks this run's sibling
            try:
                socket.send_fds(sib, [json.dumps({**req, "z1": pid}).encode()], [theirs.fileno()])
            except OSError:  # that warm sibling is gone: the run's zygote sees EOF and reports its ranks lost
                pass
            ours.close()
            theirs.close()
        WARM_CHILDREN.add(pid)
        WARM_CHILDREN.intersection_update(p for p in WARM_CHILDREN if _alive(p))
        control.sendall((json.dumps({"pid": pid}) + "\n").encode())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _become_run(req: dict, channel_fd: int, parent: int) -> None:
    """In a child of the warm zygote: become the zygote of one run, as a cold one would be."""
    global PROTO_FD
    PROTO_FD = channel_fd
    _run_environment(req)
    signal.signal(signal.SIGTERM, _ending(os.environ.get("SANDBOX_RUN_DIR"),
                                          os.environ.get("SANDBOX_OWNS_DIR") == "1"))
    die_with_parent(signal.SIGTERM, parent)  # the warm zygote gone: end this run too
    run(req["spec"], parent)


def _run_environment(req: dict) -> None:
    """In a process forked from a warm zygote (or sibling) for one run: the run's log, environment and directory."""
    log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)
    os.dup2(log, 1)
    os.close(log)
    os.environ.clear()
    os.environ.update(req["environ"])
    import torch.distributed as dist  # already imported by the warm zygote: only what it read at import is stale

    if hasattr(dist, "set_debug_level_from_env"):
        dist.set_debug_level_from_env()  # TORCH_DISTRIBUTED_DEBUG of this run, not of the warm zygote's start
    os.chdir(req["cwd"])


# ----------------------------------------------------------------------------------------------- one run

def run(spec_path: str, parent: int) -> None:
    """Read the run's spec, deal its ranks among this zygote and its siblings (one per hash seed), fork ours, host
    its store, report every exit (the siblings' through `_relay`), say done."""
    import torch

    with open(spec_path, "rb") as f:
        raw = f.read()
    spec = pickle.loads(raw)
    os.unlink(spec_path)
    info = {"ready": True, "pid": os.getpid(), "torch": torch.__version__}
    if spec.get("gpu"):
        info["gpus"] = torch.cuda.device_count()  # NVML-based (PYTORCH_NVML_BASED_CUDA_CHECK): no CUDA init before fork
        if info["gpus"] < spec["world_size"]:
            say(fatal=f"--gpu needs one GPU per rank: {spec['world_size']} ranks, {info['gpus']} GPU(s) visible.",
                usage=True)
            return
    # several nodes: the store lives on node0 (as torchrun's agent store on the master node), made from here with
    # this thread inside node0's network namespace; one node: on this machine's loopback, as ever
    nodes = [Node(**n) for n in spec.get("nodes") or ()]

    def master():
        return nodes[0].net_inside() if nodes else contextlib.nullcontext()
    with master():
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        # on node0 every address (as torchrun's agent store); the OS picks the port: runs never collide
        listener.bind(("0.0.0.0" if nodes else "127.0.0.1", 0))
        listener.listen(1024)
    port = listener.getsockname()[1]
    seeds = 1 + len(SIBLINGS)
    dealt = [list(range(spec["world_size"]))[z::seeds] for z in range(seeds)]  # rank r to zygote r % seeds
    # the siblings first, before our own preparation: each imports the run's code (and the preload, seconds) beside
    # us rather than after us. Should ours fail, our exit ends them and whatever they forked (their death signals)
    for conn, ranks in zip(SIBLINGS, dealt[1:]):
        conn.send_bytes(pickle.dumps({"spec": raw, "port": port, "ranks": ranks}))
    try:
        _prepare(spec)  # the user's module imported once, before the fork, so ranks share it
    except BaseException as e:  # noqa: BLE001  reported to the parent as the run's failure
        import traceback
        say(fatal=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-6000:])
        return
    info["preloaded"] = [m for m in preload.PRELOAD if m in sys.modules]
    info["hash_seeds"] = seeds
    say(**info)
    pids = _fork_ranks(spec, dealt[0], port, nodes, (listener.fileno(), PROTO_FD, *(c.fileno() for c in SIBLINGS)),
                       lambda r, pid: say(rank=r, pid=pid))
    with _signals_to_main_thread(), master():  # the store's own client connects to its listener, on node0 too
        store = torch.distributed.TCPStore(nodes[0].address if nodes else "127.0.0.1", port, spec["world_size"],
                                           True, wait_for_workers=False, master_listen_fd=listener.fileno(),
                                           use_libuv=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # after the fork: the ranks keep their own mask
    relays = [threading.Thread(target=_relay, args=(c, ranks), daemon=True) for c, ranks in zip(SIBLINGS, dealt[1:])]
    for t in relays:  # started with SIGCHLD blocked: it comes to the main thread's sigtimedwait
        t.start()
    _reap(pids, lambda r, code: say(exit=r, code=code), alive=lambda: os.getppid() == parent,
          orphaned=lambda: os.kill(os.getpid(), signal.SIGTERM), also=relays)  # as if the death signal had come
    del store
    say(done=True)


def _prepare(spec: dict) -> None:
    """Before the fork: the run's sys.path, the preload if its code needs it, the user's module imported."""
    from sandbox import rank as rank_mod

    sys.path[:] = spec.get("sys_path", []) + [p for p in sys.path if p not in spec.get("sys_path", [])]
    if preload.wanted() and not preload.done() and preload.needed(spec["target"], spec.get("preload") or ()):
        with _signals_to_main_thread():  # as for torch: a thread started inside must leave SIGTERM to main
            preload.run()
    rank_mod.prepare(spec)


def _fork_ranks(spec: dict, ranks: list[int], port: int, nodes: list, close: tuple, tell) -> dict[int, int]:
    """Fork `ranks`; in each, close `close` (what is ours, not the rank's), enter its node, run it. tell(rank, pid)."""
    from sandbox import rank as rank_mod

    sys.stdout.flush()
    sys.stderr.flush()
    me = os.getpid()
    for r in ranks:
        pid = os.fork()
        if pid == 0:
            try:
                for fd in close:
                    os.close(fd)
                if nodes:  # into its node before anything of the rank's runs (single-threaded: just forked)
                    nodes[spec["topology"].node_of(r)].enter()
                rank_mod.main(spec, r, port, zygote=me)  # ends the process itself once the user's code has run
            except BaseException:  # noqa: BLE001  the rank could not set itself up (log, stack file, tracer): say why
                # fd 2 is the rank's log if it could be opened (the launcher shows it as the rank's output), else
                # the zygote's stderr, zygote.log in the run directory
                report_failure(f"rank {r} failed outside its own code (exit code {EARLY_EXIT}):")
            finally:
                os._exit(EARLY_EXIT)  # never unwind into the zygote's code
        RANKS[pid] = r
        tell(r, pid)
    return RANKS


def _reap(pids: dict[int, int], tell, alive, orphaned, also: list[threading.Thread] = ()) -> None:
    """Wait for the ranks (and the `also` threads), waking for each exit (SIGCHLD, blocked by the caller or here)
    and every ORPHAN_CHECK_S to see whether whoever started us is still `alive`: a run must not outlive it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})
    while pids or any(t.is_alive() for t in also):
        while pids:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                pids.clear()
                break
            if pid == 0:
                break
            r = pids.pop(pid, None)
            if r is not None:
                tell(r, os.waitstatus_to_exitcode(status))
        if pids:
            signal.sigtimedwait({signal.SIGCHLD}, ORPHAN_CHECK_S)
        else:  # only the siblings' ranks left: a relay ends as its sibling says done
            for t in also:
                t.join(ORPHAN_CHECK_S)
        if not alive():
            orphaned()


if __name__ == "__main__":
    main()
    os._exit(0)
