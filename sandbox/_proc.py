"""Process helpers shared by the zygote and the ranks. Imports nothing of the sandbox's (and no torch), so both can
use it without importing each other."""
from __future__ import annotations

import ctypes
import os
import shutil
import signal
import time
import traceback

_PR_SET_PDEATHSIG = 1
EARLY_EXIT = 70  # a rank that failed before its user code could run (EX_SOFTWARE)
REMOVE_S = 2.0  # how long remove_dir tries: a killed writer is gone within milliseconds, even under load


def die_with_parent(sig: int, parent: int) -> None:
    """Ask the kernel to send `sig` when the parent dies; exit now if it already has."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: no death signal; the getppid check below still catches an orphan
        pass
    if os.getppid() != parent:
        os._exit(1)


def report_failure(what: str) -> None:
    """Write `what` and the exception being handled to fd 2, unbuffered, never raising.

    In a rank, fd 2 is its log file once that is open (the launcher shows it as the rank's output), and before that
    the zygote's stderr (`zygote.log` in the run directory)."""
    text = f"sandbox: {what}\n{traceback.format_exc()}"
    try:
        os.write(2, text[-16000:].encode(errors="backslashreplace"))
    except OSError:  # fd 2 is closed or its disk full: there is nowhere left to say it; the exit code still does
        pass


def kill_group_but_me() -> None:
    """SIGKILL every other process of this process's group: a run's zygote ending an orphaned run ends its siblings
    and their ranks (which it did not fork, and so cannot reap) before it removes the run directory, so that none
    writes a file there meanwhile. Linux: the group's members are read from /proc; elsewhere this does nothing, and
    the zygote's own killpg still ends them after."""
    me, group = os.getpid(), os.getpgid(0)
    try:
        names = os.listdir("/proc")
    except OSError:
        return
    for name in names:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
            # after the command's closing parenthesis: state, ppid, pgrp
            if int(stat[stat.rindex(b")") + 2:].split()[2]) == group:
                os.kill(int(name), signal.SIGKILL)
        except (OSError, ValueError, IndexError):  # it ended meanwhile (or is not ours to signal)
            pass


def remove_dir(path: str, within: float = REMOVE_S) -> None:
    """Remove `path` and everything under it, again until it is gone (bounded by `within` seconds): SIGKILL is
    delivered asynchronously, so a process being killed may still finish creating a file after rmtree listed the
    folder, and that rmtree then leaves the folder behind."""
    deadline = time.monotonic() + within
    while True:
        shutil.rmtree(path, ignore_errors=True)
        if not os.path.lexists(path) or time.monotonic() > deadline:
            return
        time.sleep(0.01)
