"""What the zygote's modules share: its pipe to the launcher and what it forked, its signal handling, and the
environment a forked run takes on."""
from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
from multiprocessing.connection import Connection

from sandbox import preload
from sandbox._proc import huge_pages, kill_group_but_me, remove_dir

PROTO_FD = 1  # the pipe (or socket) to the parent; moved off fd 1 so stray prints cannot corrupt it
ORPHAN_CHECK_S = 0.25  # how often a zygote waiting for its ranks checks that its launcher is still alive
WARM_CHILDREN: set[int] = set()  # a warm zygote's live runs (each one the leader of its own process group)
RANKS: dict[int, int] = {}  # a run's zygote: pid -> rank of the ranks it forked and has not reaped
SIBLINGS: list[Connection] = []  # a run's zygote: its siblings, each forking the ranks of another hash seed
WARM_SIBLINGS: list[socket.socket] = []  # a warm zygote's: warm siblings, each forking a run's sibling on request


def say(**msg) -> None:
    try:
        os.write(PROTO_FD, (json.dumps(msg) + "\n").encode())
    except BrokenPipeError:  # the launcher's end is closed: it is gone, and the run ends as orphaned (`ending`)
        os.kill(os.getpid(), signal.SIGTERM)


@contextlib.contextmanager
def signals_to_main_thread():
    """Threads started inside (torch's, the store's) inherit a signal mask without SIGTERM, so the kernel delivers
    SIGTERM to the main thread: the one that runs Python's handlers, and the one blocked in os.wait(). Delivered to
    another thread, it would wait there unseen until a rank exits, and an orphaned run would live on."""
    old = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def import_shared() -> None:
    """Import, once, before any fork, what every rank forked from here uses: torch, torch.distributed, the tracer
    (installed), and cloudpickle, which unpickling a launch()'s arguments imports (each rank imported it itself: 3.4
    ms of its CPU, measured on 2 cores with cProfile)."""
    with signals_to_main_thread():
        import cloudpickle  # noqa: F401
        import torch  # noqa: F401
        import torch.distributed  # noqa: F401

        from sandbox import trace

        trace.install()


class IdleWork:
    """What a warm zygote (and each warm sibling, alike) does between requests, cheapest to a run first: the preload,
    once a run has needed it (that run imported it itself; later ones fork with it in place); the libraries its runs'
    code imports (`preload.libraries`) and the sandbox's launcher; then its memory in huge pages (`huge_pages`), again
    after any import. `waiting()` says a request waits: each step is left for the next idle moment then."""

    def __init__(self) -> None:
        self.needed = False  # has a run needed the preload? Until one has, none is imported (a notebook may never)
        self.paged = False  # is the memory the runs fork from in huge pages?
        self.libraries = set(preload.OURS)

    def asked(self, req: dict) -> None:
        """A request came: what its run's code needs, for the runs after it."""
        self.needed = self.needed or bool(req.get("preload"))
        self.libraries.update(req.get("libraries") or ())

    def do(self, waiting) -> None:
        if self.needed and preload.wanted() and not preload.done() and not waiting():
            with signals_to_main_thread():  # as for torch: a thread started inside must leave SIGTERM to this one
                preload.run()
            self.paged = False
        if not waiting():
            with signals_to_main_thread():
                new = preload.wanted() and preload.import_quietly(self.libraries)
            if new or not self.paged:
                huge_pages()
                self.paged = True


def ending(run_dir: str | None, owns_dir: bool):
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


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def run_environment(req: dict) -> None:
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
