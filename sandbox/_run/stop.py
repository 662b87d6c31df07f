"""A run's stop step, and its signals: ask every live rank for its Flight Recorder dump (SIGUSR2) and then, once the
dumps are in, its Python stack (SIGUSR1, faulthandler), waiting, bounded, for each; then have the backend end the
processes (the zygote's ranks one by one, so it reports each exit; torchrun's nodes whole). Every wait here is
bounded, so a signal during teardown cannot hang it."""
from __future__ import annotations

import contextlib
import logging
import signal
import threading
import time

from sandbox._run import asks
from sandbox._run.watch import ABANDONED, INTERRUPTED

log = logging.getLogger("sandbox.launcher")

__all__ = ["ABANDONED", "INTERRUPTED", "Stopping", "interrupt_others", "noted_signals"]


_OFF_MAIN: list[list] = []  # the `held` of every run up in a thread other than the main one
_OFF_MAIN_LOCK = threading.Lock()


def interrupt_others(signum: int = signal.SIGINT) -> None:
    """Note `signum` in every run up outside the main thread, as its own handler would: each stops within a poll and
    raises `Interrupted` where it was started. For the main thread, when it noted a signal while it waited on runs
    it had started in threads (`sandbox.explore` runs several schedules at once)."""
    with _OFF_MAIN_LOCK:
        for held in _OFF_MAIN:
            held.append(signum)


@contextlib.contextmanager
def noted_signals(held: list):
    """While a run is up, SIGINT and SIGTERM are noted in `held`, not raised: the watch sees them within one poll
    and stops the run, and a signal during teardown cannot cut it short (every step of it is bounded).
    Only the main thread can set handlers; elsewhere a KeyboardInterrupt is caught where it lands, and the run is
    listed for `interrupt_others` (the main thread, interrupted while such runs are up, passes the signal on)."""
    if threading.current_thread() is not threading.main_thread():
        with _OFF_MAIN_LOCK:
            _OFF_MAIN.append(held)
        try:
            yield
        finally:
            with _OFF_MAIN_LOCK:  # by identity: every run's list starts out empty, and equal
                _OFF_MAIN[:] = [h for h in _OFF_MAIN if h is not held]
        return

    def handler(signum, frame):
        held.append(signum)

    old = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in old:
        signal.signal(s, handler)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


class Stopping:
    """The stop step of `sandbox._run.lifecycle.Lifecycle`."""

    def _stop(self, why: str, stacks_taken: bool = False) -> None:
        """Fetch every live rank's Python stack (unless just done) and recorder dump, then end the run's processes.
        ABANDONED: the job is over by itself and the processes left are ended as they are (no verdict of ours)."""
        self.stopped_for = None if why == ABANDONED else why
        self.ended_at = time.time()
        self.procs.poll(0)
        live = self._live(parse=True)  # ended by us, or (not started yet) never to start
        if why != ABANDONED:
            if why != INTERRUPTED:
                # the recorder dumps first, the stacks after: faulthandler's dump of every thread (SIGUSR1) reads the
                # other threads' Python frames without the GIL, and the recorder's thread runs Python while it
                # dumps; asked at once, a rank now and then died of SIGSEGV ("Fatal Python error: Segmentation fault")
                self._ask_flight(live)
            if not stacks_taken:
                self._ask_stacks(live, asks.STACK_WAIT_INTERRUPTED_S if why == INTERRUPTED else asks.STACK_WAIT_S)
            self.procs.poll(0)
        self.procs.end(live, why)
        log.info("ended ranks %s", [t.rank for t in live])
