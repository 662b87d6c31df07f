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


def alive(pid: int) -> bool:
    """Does process `pid` still run? A zombie (ended, not reaped yet) does not: its sockets are closed, its files
    written, and it will never answer a signal."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):  # no such process
        return False


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


_MADV_COLLAPSE = 25  # Linux 6.1+: back a range with transparent huge pages now, whatever the sysfs THP setting
_HUGE = 1 << 21  # 2 MiB, an x86-64 or arm64 huge page
HUGE_PAGES_ENV = "SANDBOX_HUGE_PAGES"


def huge_pages() -> int:
    """Back this process's writable private memory (the heap, anonymous maps) with 2 MiB pages where Linux can, best
    effort; the bytes it tried. For a warm zygote, which forks every run and each run's ranks from the same memory
    (torch imported: about 150 MB of heap and anonymous maps on x86-64): a fork copies one page-table entry per 4 KiB
    page it maps, and the child's exit frees them, where a huge page is one entry until a write splits it. With
    torch 2.13 on 2 cores this took 0.35 s, once, and a warm 4-rank run after it cost 0.86 of the CPU it cost
    before (`benchmarks/huge_pages.py`, docs/performance.md). Elsewhere (an older kernel, not Linux) the call fails
    and nothing changes. SANDBOX_HUGE_PAGES=0 turns it off."""
    if os.environ.get(HUGE_PAGES_ENV) == "0":
        return 0
    try:
        madvise = ctypes.CDLL(None, use_errno=True).madvise
        madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
        with open("/proc/self/maps") as f:
            maps = f.read().splitlines()
    except (OSError, AttributeError):
        return 0
    tried = 0
    for line in maps:
        fields = line.split()
        if fields[1] != "rw-p" or (len(fields) > 5 and fields[5] != "[heap]"):
            continue  # files' pages, the stack and guard pages stay as they are
        start, end = (int(x, 16) for x in fields[0].split("-"))
        start, end = -(-start // _HUGE) * _HUGE, end // _HUGE * _HUGE
        if end > start and madvise(start, end - start, _MADV_COLLAPSE) == 0:
            tried += end - start
    return tried
