"""One run: its spec read, its ranks dealt among this zygote and its siblings, ours forked, its store hosted, every
exit reported."""
from __future__ import annotations

import contextlib
import os
import pickle
import signal
import socket
import sys
import threading
from multiprocessing.connection import Connection

from sandbox import preload
from sandbox._proc import EARLY_EXIT, report_failure
from sandbox._zygote import common
from sandbox._zygote.common import ORPHAN_CHECK_S, RANKS, SIBLINGS, pid_alive, say, signals_to_main_thread
from sandbox.nodes import Node


def run(spec_path: str, parent: int, launcher: int | None = None) -> None:
    """Read the run's spec, deal its ranks among this zygote and its siblings (one per hash seed), fork ours, host
    its store, report every exit (the siblings' through `relay`), say done. The run ends itself once `parent` is
    gone, or `launcher` (the process that asked a shared warm zygote for it; None: `parent` is the launcher's)."""
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
        prepare(spec)  # the user's module imported once, before the fork, so ranks share it
    except BaseException as e:  # noqa: BLE001  reported to the parent as the run's failure
        import traceback

        from sandbox import rank as rank_mod
        if isinstance(e, rank_mod.TopLevelLaunch):  # the program's shape, not the run: the launcher raises it
            say(fatal=str(e), usage=True)
            return
        say(fatal=f"{type(e).__name__}: {e}", traceback=traceback.format_exc()[-6000:])
        return
    info["preloaded"] = [m for m in preload.PRELOAD if m in sys.modules]
    info["hash_seeds"] = seeds
    say(**info)
    ours = (listener.fileno(), common.PROTO_FD, *(c.fileno() for c in SIBLINGS))  # not the ranks': closed in each
    pids = fork_ranks(spec, dealt[0], port, nodes, ours, lambda r, pid: say(rank=r, pid=pid))
    with signals_to_main_thread(), master():  # the store's own client connects to its listener, on node0 too
        store = torch.distributed.TCPStore(nodes[0].address if nodes else "127.0.0.1", port, spec["world_size"],
                                           True, wait_for_workers=False, master_listen_fd=listener.fileno(),
                                           use_libuv=True)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGCHLD})  # after the fork: the ranks keep their own mask
    relays = [threading.Thread(target=relay, args=(c, ranks), daemon=True) for c, ranks in zip(SIBLINGS, dealt[1:])]
    for t in relays:  # started with SIGCHLD blocked: it comes to the main thread's sigtimedwait
        t.start()
    reap(pids, lambda r, code: say(exit=r, code=code),
         alive=lambda: os.getppid() == parent and (launcher is None or pid_alive(launcher)),
         orphaned=lambda: os.kill(os.getpid(), signal.SIGTERM), also=relays)  # as if the death signal had come
    del store
    say(done=True)


def prepare(spec: dict) -> None:
    """Before the fork: the run's sys.path, the preload if its code needs it, the user's module imported."""
    from sandbox import rank as rank_mod

    sys.path[:] = spec.get("sys_path", []) + [p for p in sys.path if p not in spec.get("sys_path", [])]
    if preload.wanted() and not preload.done() and preload.needed(spec["target"], spec.get("preload") or ()):
        with signals_to_main_thread():  # as for torch: a thread started inside must leave SIGTERM to main
            preload.run()
    rank_mod.prepare(spec)


def fork_ranks(spec: dict, ranks: list[int], port: int, nodes: list, close: tuple, tell) -> dict[int, int]:
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


def reap(pids: dict[int, int], tell, alive, orphaned, also: list[threading.Thread] = ()) -> None:
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


def relay(conn: Connection, ranks: list[int]) -> None:
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
