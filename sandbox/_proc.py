"""Process helpers shared by the zygote and the ranks. Imports nothing of the sandbox's (and no torch), so both can
use it without importing each other."""
from __future__ import annotations

import ctypes
import os
import traceback

_PR_SET_PDEATHSIG = 1
EARLY_EXIT = 70  # a rank that failed before its user code could run (EX_SOFTWARE)


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
