"""A run's stop and reap steps, and its signals: ask every live rank for its Python stack (SIGUSR1, faulthandler),
end the ranks one by one (so the zygote reports each exit), wait, bounded, for those reports, then end the run's
whole process group. Every wait here is bounded, so a signal during teardown cannot hang it."""
from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
import time

from sandbox import rundir
from sandbox._run.watch import FLIGHT_WAIT_S, INTERRUPTED, STACK_WAIT_S
from sandbox.events import RankTrack

log = logging.getLogger("sandbox.launcher")

STACK_WAIT_INTERRUPTED_S = 0.25  # how long to wait for the stack dumps after Ctrl-C: the user wants out
REAP_WAIT_S = 5.0           # how long the zygote gets to report every rank's exit
REAP_WAIT_INTERRUPTED_S = 0.2
ZYGOTE_EXIT_S = 2.0         # how long a SIGKILLed zygote gets to be gone


@contextlib.contextmanager
def noted_signals(held: list):
    """While a run is up, SIGINT and SIGTERM are noted in `held`, not raised: the watch sees them within one poll
    and stops the run, and a signal during teardown cannot cut it short (every step of it is bounded).
    Only the main thread can set handlers; elsewhere a KeyboardInterrupt is caught where it lands."""
    if threading.current_thread() is not threading.main_thread():
        yield
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
    """The signal, stop and reap steps of `sandbox._run.Run`."""

    def _signals(self):
        return noted_signals(self.held)

    def _stop(self, why: str, stacks_taken: bool = False) -> None:
        """Fetch every live rank's Python stack (unless just done), then end the whole run."""
        self.stopped_for = why
        self.ended_at = time.time()
        self._pump(0)
        for t in self._live():  # ended by us, or (not forked yet) never to start
            t.ended_by_sandbox = True
        live = [t for t in self._live() if t.pid]
        if why != INTERRUPTED:
            # the recorder dumps first, the stacks after: faulthandler's dump of every thread (SIGUSR1) reads the
            # other threads' Python frames without the GIL, and the recorder's thread runs Python while it dumps;
            # asked at once, a rank now and then died of SIGSEGV ("Fatal Python error: Segmentation fault")
            self._ask_flight(live, FLIGHT_WAIT_S)
        if not stacks_taken:
            self._ask_stacks(live, STACK_WAIT_INTERRUPTED_S if why == INTERRUPTED else STACK_WAIT_S)
        self._pump(0)
        # every rank frozen first, then killed one by one (so the zygote reaps each and reports its exit status):
        # a rank still running while a peer dies sees the connection close and prints gloo's error about it
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for t in live:
                try:
                    os.kill(t.pid, sig)
                except ProcessLookupError:  # it ended on its own meanwhile
                    pass
        log.info("ended ranks %s", [t.rank for t in live])
        if why == INTERRUPTED:
            self._kill()  # the user wants out: the zygote too, even if it is still starting or forking

    def _ask_stacks(self, live: list[RankTrack], wait: float) -> None:
        """SIGUSR1 to every live rank (faulthandler dumps its stack and it carries on); wait, bounded, for the dumps."""
        if live:
            log.info("asking ranks %s for their Python stacks", [t.rank for t in live])
        for t in live:
            try:
                os.kill(t.pid, signal.SIGUSR1)
            except ProcessLookupError:  # it ended on its own meanwhile: nothing to ask
                pass
        paths = {t.rank: rundir.stack(self.dir, t.rank) for t in live}
        sizes: dict = {}
        deadline = time.monotonic() + wait
        while paths and time.monotonic() < deadline:
            if self.held and self.stopped_for != INTERRUPTED:  # Ctrl-C while we wait: end everything now
                break
            now = {r: (os.path.getsize(p) if os.path.exists(p) else 0) for r, p in paths.items()}
            if all(now[r] > self.stack_from.get(r, 0) for r in now) and now == sizes:
                break
            sizes = now
            time.sleep(0.03)

    def _kill(self) -> None:
        """End the run's whole process group: the zygote, the ranks, and anything the ranks started."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the group is already empty (PermissionError: macOS says so)
            pass

    def _reap(self) -> None:
        """Wait (bounded) for the zygote to report every exit, then make sure nothing of ours remains."""
        deadline = time.monotonic() + (REAP_WAIT_INTERRUPTED_S if self.held else REAP_WAIT_S)
        while not (self.channel.eof or self.zygote_done) and time.monotonic() < deadline:
            self._messages(0.05)
            if self.proc.poll() is not None:
                self._messages(0)
                break
            if self.held and deadline - time.monotonic() > REAP_WAIT_INTERRUPTED_S:
                deadline = time.monotonic() + REAP_WAIT_INTERRUPTED_S
        self._kill()
        try:
            self.proc.wait(timeout=ZYGOTE_EXIT_S)
        except subprocess.TimeoutExpired:  # SIGKILL cannot be refused; only an unkillable (D-state) process stays
            log.info("the zygote did not exit within %g s of SIGKILL", ZYGOTE_EXIT_S)
        self._kill()  # anything the ranks forked stays in our process group: end it too
        log.info("run's process group %d ended", self.proc.pid)
