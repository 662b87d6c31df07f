"""A run's watch step, for either launcher: read what the processes and their traces say (the backend's `poll`),
fire the faults that came due, and ask the one judge (`sandbox.policy.decide`) whether to stop. While every rank is
busy in its own code the backend may answer from each rank's last trace line alone, so a traced busy loop costs the
parent next to nothing; the traces are parsed when the policy is asked.

When the traces go quiet, or a rank failed, some ranks may be blocked where the tracer cannot see (a collective made
in C++, such as DDP's gradient all_reduce): their Flight Recorders are asked for dumps, merged into the view
(`sandbox.flight_view`). A deadlock the traces prove is named before the grace period, once confirmed: the stacks
are taken, and the ranks must still be in the very calls they were in.

The policy rules on a view that is true at one moment: each track says when it was read (`RankTrack.seen_t`), and
the dumps, snapshots taken when they were asked for, join the view only while no live rank's trace has moved since
(`_fresh_dumps`); a call a dump added counts as blocked only up to when the dumps were asked for.
"""
from __future__ import annotations

import dataclasses
import logging
import os
import signal
import time

from sandbox import faults, flight_view, policy, rundir
from sandbox._run import asks
from sandbox._run.procs import pid_of
from sandbox.events import RankTrack

log = logging.getLogger("sandbox.launcher")

INTERRUPTED = policy.INTERRUPTED  # why a run was stopped after Ctrl-C or SIGTERM (the verdict of the same name)
ABANDONED = "abandoned"      # the backend's processes left are ended without a verdict of the sandbox's own


class Watching:
    """The watch step of `sandbox._run.lifecycle.Lifecycle`."""

    # ------------------------------------------------------------------------------------------- what is seen
    def _current(self, parse: bool = False) -> dict[int, RankTrack]:
        """The tracks as the hang rule sees them, without the recorders' calls."""
        return self.procs.watched(self.procs.tracks(parse))

    def _live(self, parse: bool = False) -> list[RankTrack]:
        return [t for t in self._current(parse).values() if t.exit_code is None]

    def _view(self) -> tuple[dict[int, RankTrack], bool]:
        """The tracks as the judge sees them: the tracer's, merged with what the ranks' Flight Recorders saw (the
        collectives made in C++, by DDP's reducer and the like) while the dumps are fresh (`_fresh_dumps`); and
        whether the recorders added anything. What a dump added is true only as of when it was asked for."""
        tracks = self.procs.tracks()
        dumps = self.dumps.now() if self._fresh_dumps() else {}
        merged = flight_view.merge(tracks, dumps) if dumps else tracks
        if merged is tracks:
            return self.procs.watched(tracks), False
        live = [r for r in dumps if r in tracks and tracks[r].exit_code is None]
        asked = min((self.dump_asked[r][0] for r in live if r in self.dump_asked), default=None)
        for r, t in merged.items():
            if t is not tracks[r]:
                t.seen_t = tracks[r].seen_t
                if asked is not None and t.pending is not None and t.pending.get("lens") == "flight":
                    t.seen_t = asked if t.seen_t is None else min(t.seen_t, asked)  # a call only a dump shows
        return self.procs.watched(merged), True

    def _fresh_dumps(self) -> bool:
        """May the live ranks' dumps join the view? A dump is a snapshot taken when it was asked for; once a rank
        has written trace lines since, its dump is behind its trace (a call it shows running has returned, later
        calls are missing, sequence numbers differ), and a view made of both never held at any one moment. Stale
        dumps stay out until the traces are quiet again and fresh ones are asked for. (A rank with no process yet,
        one torchrun has still to restart, cannot be asked: its last dump is left to the merge, which its fresh
        track does not take.)"""
        for t in self._live():
            if pid_of(t) and os.path.exists(rundir.flight(self.dir, t.rank)):
                asked = self.dump_asked.get(t.rank)
                if asked is None or asked[1] != self.procs.lines_read(t.rank):
                    return False
        return True

    def _calls_of(self, rank: int) -> int:
        """How many traced calls `rank` has entered (for a fault that waits for a rank's k-th call)."""
        t = self._current(parse=True).get(rank)
        return faults.calls_entered(t) if t is not None else 0

    # ------------------------------------------------------------------------------------------- asking the ranks
    def _ask_flight(self, live: list[RankTrack]) -> None:
        """SIGUSR2 to every live rank whose recorder is armed: its recorder thread dumps the recorder, even while the
        rank is blocked in a collective. Waits, bounded, for the new dumps (cut short by Ctrl-C, as for the stacks),
        and notes when each was asked for."""
        armed = [t for t in live if t.hello and t.hello.get("flight")]  # armed: SIGUSR2 is their recorder's
        before = asks.flight_stamps(self.dir, [t.rank for t in armed])
        when, read = time.time(), {t.rank: self.procs.lines_read(t.rank) for t in armed}  # before the signal
        asked = {r: before[r] for r in self.procs.signal(armed, signal.SIGUSR2)}
        for r in asks.await_flight(self.dir, asked, asks.FLIGHT_WAIT_S, gone=self.procs.gone,
                                   cut_short=lambda: bool(self.held) and self.stopped_for != INTERRUPTED):
            self.dump_asked[r] = (when, read[r])  # taken after the signal, when the rank had written no more

    def _ask_stacks(self, live: list[RankTrack], wait: float) -> None:
        """SIGUSR1 to every live rank (faulthandler dumps its stack and it carries on); wait, bounded, for the dumps
        (cut short by Ctrl-C, unless the run is being stopped for it)."""
        if live:
            log.info("asking ranks %s for their Python stacks", [t.rank for t in live])
        asked = self.procs.signal(live, signal.SIGUSR1)
        asks.await_stacks(self.dir, asked, self.stack_from, wait, gone=self.procs.gone,
                          cut_short=lambda: bool(self.held) and self.stopped_for != INTERRUPTED)

    # ------------------------------------------------------------------------------------------- the watchdog
    def _watch(self) -> None:
        start = last_change = time.monotonic()
        fail_t = None
        asked, asked_on_failure = start, False
        while True:
            if self.held:
                log.info("interrupted (signal %d): stopping the run", self.held[0])
                return self._stop(INTERRUPTED)
            if self.procs.poll(self.procs.POLL_S):
                last_change = time.monotonic()
            if self.schedule is not None and self.schedule.faults:
                self.schedule.poll(time.monotonic() - start, self._calls_of)
            over = self.procs.over(time.monotonic() - start)
            if over:
                if isinstance(over, str):
                    log.info("stopping the run: %s", over)
                    self._stop(ABANDONED)
                return
            now = time.monotonic()
            if fail_t is None and any(t.exit_code not in (None, 0) for t in self._current().values()):
                fail_t = now
            live = self._live()
            blocked = all(self.procs.may_block(t) for t in live)
            quiet = now - last_change >= self.settings.hang_after and now - asked >= self.settings.hang_after
            if fail_t is None and now - start <= self.settings.timeout and not quiet and (
                    not blocked or self.procs.in_one_call(live)):
                continue
            # while the view takes calls from dumps, they are true only as of when they were asked for: ask again,
            # blocked or not, once the traces are quiet (dumps behind the traces are left out of the view meanwhile)
            on_dumps = quiet and any(os.path.exists(rundir.flight(self.dir, t.rank)) for t in live)
            if (not blocked or on_dumps) and (quiet or (fail_t is not None and not asked_on_failure)):
                # the traces are quiet, or a rank failed: some ranks may be blocked where the tracer cannot see
                self._ask_flight(self._live(parse=True))
                asked, asked_on_failure = time.monotonic(), fail_t is not None
            view, merged = self._view()
            d = policy.decide(view, time.time(), elapsed=now - start, quiet_s=now - last_change,
                              failed_since=None if fail_t is None else now - fail_t, settings=self.settings)
            if d is not None and merged:
                d = dataclasses.replace(d, provable=False)  # the confirmation step reads the tracer's tracks alone
            if d is not None and d.provable and not self._still_provable(d):
                last_change = time.monotonic()
                continue
            if d is not None:
                log.info("stopping the run: %s", d.reason)
                self.detect_s = d.blocked_s if d.stop == policy.HANG else None
                return self._stop(d.stop, stacks_taken=d.provable)

    def _still_provable(self, d: policy.Decision) -> bool:
        """A deadlock the traces prove: take the stacks, then check the ranks are still in the very same calls
        (if one returned meanwhile, the stacks taken are stale and the watch goes on)."""
        log.info("%s: confirming while the stacks are taken", d.reason)
        live = self._live(parse=True)
        blocked = {t.rank: t.pending["id"] for t in live if t.pending is not None}
        self._ask_stacks(live, asks.STACK_WAIT_S)
        if self._confirmed(blocked):
            return True
        log.info("%s, but a call returned while the stacks were taken: watching on", d.reason)
        self.stack_from = asks.stack_marks(self.dir, range(self.n))
        return False

    def _confirmed(self, blocked: dict[int, int]) -> bool:
        """After a provable deadlock was named: are the ranks still inside the very calls they were in? gloo may yet
        pair two calls the traces call different (a barrier with a one-element all_reduce), and a loaded machine
        may hold back an exit line; taking the stacks gives them that time, and the traces are read again."""
        self.procs.poll(0)
        return all(t.exit_code is None and t.pending is not None and t.pending["id"] == blocked.get(t.rank)
                   and not t.inflight for t in self._current(parse=True).values() if t.rank in blocked)
