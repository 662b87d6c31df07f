"""Rank programs for the hygiene and interrupt tests: ranks that start processes of their own, that sit in their own
code, or that never answer the sandbox's request for their stacks. Each rank leaves notes (small files in a
directory the test gives) saying what it did, so the test can wait for a condition instead of a guessed delay.

The functions are for `launch`; the same file is a script for the CLI tests:

    python -m sandbox.run -n 2 --json tests/scenarios_proc.py STAGE [NOTES_DIR]

STAGE is `allreduce` (a correct run that prints its rendezvous port; no NOTES_DIR), `sleepy` (the ranks note that
they started, then sleep), `litter` (the ranks make files in the run's directory without pause), `busy` (each
rank starts a child process, then sits in its own code) or `deaf_hang` (each rank starts a child, then hangs in a
collective mismatch with SIGUSR1 caught at the C level only, so its stack never comes and the sandbox waits for it).
"""
import datetime
import os
import signal
import subprocess
import sys
import time

import torch
import torch.distributed as dist


def note(notes: str, name: str, text: str = "") -> None:
    """Write a note whole (a test polls for it and must never read half of it)."""
    tmp = os.path.join(notes, f".{name}.{os.getpid()}")
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, os.path.join(notes, name))


def read_notes(notes: str, prefix: str) -> dict[str, str]:
    return {n: open(os.path.join(notes, n)).read() for n in os.listdir(notes) if n.startswith(prefix)}


def _init():
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    return dist.get_rank(), dist.get_world_size()


def start_child(notes: str, rank: int) -> None:
    """A process of the rank's own (a data loader worker, a shell command): it must not outlive the run."""
    child = subprocess.Popen(["sleep", "301"])
    note(notes, f"child-{rank}", str(child.pid))


def _mismatch(rank: int) -> None:
    t = torch.ones(4)
    if rank == 0:
        dist.all_reduce(t)
    else:
        dist.broadcast(t, src=0)  # BUG: the others are in all_reduce


def children_then(what: str, notes: str):
    """Every rank starts a child; once all children run, the run hangs or one rank dies."""
    rank, _ = _init()
    start_child(notes, rank)
    dist.barrier()  # every rank's child is up before anything goes wrong
    if what == "hang":
        _mismatch(rank)
    elif rank == 1 and what == "exit":
        os._exit(3)
    elif rank == 1 and what == "signal":
        os.kill(os.getpid(), signal.SIGKILL)  # as the OOM killer would
    dist.all_reduce(torch.ones(1))  # the peers wait here for the rank that died


def pid_then_ok(notes: str):
    """Notes its pid, then a short correct run: the test interrupts it as it ends."""
    note(notes, f"pid-{os.environ['RANK']}", str(os.getpid()))
    rank, ws = _init()
    t = torch.ones(2)
    dist.all_reduce(t)
    dist.destroy_process_group()
    return t.tolist()


def busy(notes: str, seconds: float = 60):
    """Every rank starts a child, notes that it runs, then sits in its own code."""
    rank, _ = _init()
    start_child(notes, rank)
    note(notes, f"running-{rank}", str(os.getpid()))
    time.sleep(seconds)


def sleepy(notes: str, seconds: float = 60):
    note(notes, f"started-{os.environ['RANK']}", str(os.getpid()))
    time.sleep(seconds)


def deaf_hang(notes: str):
    """A hang whose ranks never dump their stacks: SIGUSR1 (the sandbox's request) replaces faulthandler's handler
    with a Python one, which cannot run while the rank is blocked inside gloo. The C-level part still writes the
    signal to the wakeup fd, a note file: the test sees the request arrive, and the sandbox waits for a stack."""
    rank, _ = _init()
    start_child(notes, rank)
    dist.barrier()
    fd = os.open(os.path.join(notes, f"usr1-{rank}"), os.O_WRONLY | os.O_CREAT | os.O_NONBLOCK, 0o644)
    signal.set_wakeup_fd(fd)
    signal.signal(signal.SIGUSR1, lambda signum, frame: None)
    _mismatch(rank)


def litter(notes: str, seconds: float = 60):
    """Every rank notes its pid, then makes new files in the run's directory (its log's folder: fd 1) without pause:
    a rank still writing there when its run is ended, as one that dumps its stacks or a Flight Recorder trace as
    a peer dies."""
    rank = os.environ["RANK"]
    run_dir = os.path.dirname(os.readlink("/proc/self/fd/1"))
    note(notes, f"writing-{rank}", str(os.getpid()))
    deadline = time.monotonic() + float(seconds)
    i = 0
    while time.monotonic() < deadline:
        try:
            open(os.path.join(run_dir, f"litter-{rank}-{i}"), "w").close()
        except OSError:  # the directory is gone: the rank is about to be
            pass
        i += 1


def allreduce():
    """examples/allreduce.py, saying which rendezvous port this rank was given."""
    rank, world = _init()
    print(f"MASTER_PORT={os.environ['MASTER_PORT']}")
    t = torch.full((4,), float(rank + 1))
    dist.all_reduce(t)
    print(f"sum over {world} ranks: {t.tolist()}")
    dist.destroy_process_group()


if __name__ == "__main__":
    stage, *args = sys.argv[1:]
    {"sleepy": sleepy, "busy": busy, "litter": litter, "deaf_hang": deaf_hang, "allreduce": allreduce}[stage](*args)
