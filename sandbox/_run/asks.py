"""What the lifecycle asks of live ranks, and how long it waits for the answer: a Python stack (SIGUSR1: the rank's
faulthandler appends it to `stack-<R>.txt` and the rank carries on) and a Flight Recorder dump (SIGUSR2: the rank's
recorder thread writes `fr-<R>.pkl`, atomically, even while the rank is blocked in a collective). Each wait ends as
soon as every file asked for is there, and never later than its bound: no sleep decides what is seen.

A stack file keeps every dump a rank wrote; a `Mark` says where the last one it had before a request ended (and of
which file: a worker torchrun restarted writes a new one), so a request waits for a new dump and the report shows the
last one only.
"""
from __future__ import annotations

import os
import time
from typing import Callable, NamedTuple

from sandbox import events, flight, rundir

STACK_WAIT_S = 1.0           # how long hung ranks get to write their Python stacks
STACK_WAIT_INTERRUPTED_S = 0.25  # the same after Ctrl-C: the user wants out
FLIGHT_WAIT_S = 0.5          # how long the ranks' Flight Recorder dumps may take
LOOK_S = 0.02                # how often a wait looks at the files


class Mark(NamedTuple):
    inode: int
    size: int


def _stat(path: str) -> os.stat_result | None:
    try:
        return os.stat(path)
    except FileNotFoundError:  # not written yet (or moved away: a restarted worker's earlier attempt)
        return None


def mark(path: str) -> Mark | None:
    st = _stat(path)
    return None if st is None else Mark(st.st_ino, st.st_size)


def _past(path: str, before: Mark | None) -> int:
    """How many bytes of the file at `path` were written after `before` (all of it if it is another file)."""
    st = _stat(path)
    if st is None:
        return 0
    return st.st_size - before.size if before is not None and before.inode == st.st_ino else st.st_size


def stack_marks(run_dir: str, ranks) -> dict[int, Mark]:
    """Where each rank's stack file ends now: dumps up to here are stale."""
    return {r: m for r in ranks if (m := mark(rundir.stack(run_dir, r))) is not None}


def read_stack(run_dir: str, rank: int, since: Mark | None) -> str | None:
    """The rank's stack dumps written after `since` (its last ones), or None."""
    path = rundir.stack(run_dir, rank)
    text = events.read_text(path)
    new = _past(path, since)
    text = text[len(text) - new:] if new < len(text) else text  # stack dumps are ASCII: bytes and characters agree
    return text or None


def await_stacks(run_dir: str, ranks: list[int], marks: dict[int, Mark], wait: float,
                 cut_short: Callable[[], bool] = lambda: False, gone: Callable[[int], bool] = lambda r: False) -> bool:
    """Wait, at most `wait` s, until every rank asked has written a stack past its mark and its file has stopped
    growing (a dump of many threads is written in pieces). True if all came. `cut_short()`: give up now. `gone(r)`:
    rank r's process has ended; if it wrote no stack by then, it never will, and is not waited for."""
    paths = {r: rundir.stack(run_dir, r) for r in ranks}
    deadline, sizes, came = time.monotonic() + wait, None, True
    while paths and time.monotonic() < deadline and not cut_short():
        ended = {r for r in paths if gone(r)}  # asked first: what a rank wrote before it ended is read below
        now = {r: _past(p, marks.get(r)) for r, p in paths.items()}
        for r in ended:
            if not now[r]:
                came = False
                del paths[r], now[r]
        if all(now.values()) and now == sizes:
            return came
        sizes = now
        time.sleep(LOOK_S)
    return came and not paths


def flight_stamps(run_dir: str, ranks) -> dict[int, tuple | None]:
    """Each rank's dump as it is now (a dump is replaced whole: a new inode), to tell a new one from it."""
    out = {}
    for r in ranks:
        st = _stat(rundir.flight(run_dir, r))
        out[r] = None if st is None else (st.st_ino, st.st_mtime_ns)
    return out


def await_flight(run_dir: str, before: dict[int, tuple | None], wait: float,
                 cut_short: Callable[[], bool] = lambda: False,
                 gone: Callable[[int], bool] = lambda r: False) -> set[int]:
    """Wait, at most `wait` s, until every rank asked has replaced its dump, or ended (`gone(r)`: its process has
    ended, and will never write one); returns the ranks that did replace it. `cut_short()`: give up now."""
    deadline = time.monotonic() + wait
    while True:
        ended = {r for r in before if gone(r)}  # asked first: a dump a rank wrote before it ended is read below
        now = flight_stamps(run_dir, before)
        new = {r for r in before if now[r] is not None and now[r] != before[r]}
        if len(new | ended) == len(before) or time.monotonic() >= deadline or cut_short():
            return new
        time.sleep(LOOK_S)


class Dumps:
    """The ranks' Flight Recorder dumps for the watch, read again only when one of the files changed (a long run's
    watch would otherwise unpickle every dump at every look)."""

    def __init__(self, run_dir: str):
        self.dir, self.stamps, self.dumps = run_dir, None, {}

    def now(self) -> dict[int, dict]:
        stamps = flight_stamps(self.dir, rundir.ranks_with(self.dir, rundir.FLIGHT))
        if stamps != self.stamps:
            self.stamps, self.dumps = stamps, flight.read_run(self.dir)
        return self.dumps
