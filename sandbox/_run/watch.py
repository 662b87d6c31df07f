"""A run's watch step: read what the zygote says (`sandbox.channel`) and what the ranks trace (`sandbox.events`),
and ask the watchdog policy (`sandbox.policy.decide`) whether to stop. While every rank is busy in its own code the
watch reads each rank's last trace line alone, so a traced busy loop costs the parent next to nothing; the traces
are parsed when the policy is asked.

The policy rules on a view that is true at one moment: each track says when it was read (`RankTrack.seen_t`), and
the ranks' Flight Recorder dumps, snapshots taken when they were asked for, join the view only while no rank's trace
has moved since (`_fresh_dumps`); a call a dump added counts as blocked only up to when the dumps were asked for."""
from __future__ import annotations

import logging
import os
import signal
import time

import dataclasses

from sandbox import events, faults, flight, flight_view, policy, rundir
from sandbox.events import RankTrack

log = logging.getLogger("sandbox.launcher")

POLL_S = 0.02               # how often the watchdog looks
STACK_WAIT_S = 1.0          # how long to wait for the ranks' stack dumps before ending them
FLIGHT_WAIT_S = 0.5         # how long to wait for the ranks' Flight Recorder dumps
INTERRUPTED = "interrupted"  # why a run was stopped after Ctrl-C or SIGTERM (the verdict of the same name)


class Watching:
    """The reading and watching steps of `sandbox._run.Run`."""

    # ------------------------------------------------------------------------------------------- reading
    def _messages(self, wait: float) -> None:
        for msg in self.channel.poll(wait):
            if "pid" in msg and "rank" in msg:
                self.tracks[msg["rank"]].pid = msg["pid"]
                if msg["rank"] == self.n - 1:
                    log.info("ranks forked: pids %s", [t.pid for t in self.tracks.values()])
            elif "exit" in msg:
                t = self.tracks[msg["exit"]]
                t.exit_code, t.exit_t = msg["code"], time.time()
                log.info("rank %d ended (exit status %d)", t.rank, t.exit_code)
            elif "fatal" in msg:
                self.fatal = msg
                log.info("the zygote could not start the ranks: %s", msg["fatal"])
            elif msg.get("ready"):
                log.info("zygote ready (torch %s, preloaded: %s)", msg.get("torch"),
                         ", ".join(msg.get("preloaded") or ()) or "nothing")
            elif msg.get("done"):
                self.zygote_done = True
        if self.channel.eof and not self.zygote_done:
            log.info("the zygote's pipe closed")

    def _pump(self, wait: float, parse: bool = True) -> bool:
        """Read what the zygote and the ranks wrote; True if a trace grew. Trace lines are parsed only when
        `parse` is set: while the ranks run, the watchdog looks at each rank's last line alone."""
        self._messages(wait)
        grew = False
        for r, tail in self.tails.items():
            seen = time.time()
            lines = tail.lines()
            self.tracks[r].seen_t = seen  # read to its end: the track is true at least as of then
            if lines:
                grew = True
                self.raw[r].extend(lines)
                self.last[r] = lines[-1]
                self._read_lines[r] = self._read_lines.get(r, 0) + len(lines)
        if parse:
            self._parse()
        for r, tail in self.log_tails.items():
            for line in tail.lines():
                self.on_output(r, line.decode(errors="replace"))
        return grew

    def _parse(self) -> None:
        for r, lines in self.raw.items():
            t = self.tracks[r]
            for line in lines:
                ev = events.parse(line)
                if ev is not None:
                    t.feed(ev)
            lines.clear()

    def _may_block(self, t: RankTrack) -> bool:
        """Is rank t perhaps inside a call? Its last trace line tells, except after a `done` line (an NCCL call
        finished on the GPU while later ones may still be in flight): then its parsed track tells."""
        last = self.last[t.rank]
        if events.is_done(last):
            self._parse()
            return t.pending is not None
        return events.may_block(last)

    # Filled as the run is watched (kept here, not in Run.__init__, while the launchers' lifecycles are apart):
    # rank -> trace lines read so far; rank -> (when its dump now on disk was asked for, its lines read by then)
    @property
    def _read_lines(self) -> dict[int, int]:
        return self.__dict__.setdefault("_read_lines_", {})

    @property
    def _dump_asked(self) -> dict[int, tuple[float, int]]:
        return self.__dict__.setdefault("_dump_asked_", {})

    def _view(self, watching: bool = False) -> dict[int, RankTrack]:
        """The tracks as the judge sees them: the tracer's, merged with what the ranks' Flight Recorders saw
        (`sandbox.flight_view.merge`: the collectives made in C++, by DDP's reducer and the like). While `watching`,
        dumps join only when fresh (`_fresh_dumps`), and what they add is true only as of when they were asked for."""
        if watching and not self._fresh_dumps():
            return self.tracks
        dumps = flight.read_run(self.dir)
        view = flight_view.merge(self.tracks, dumps) if dumps else self.tracks
        if view is self.tracks:
            return view
        live = [r for r in dumps if self.tracks[r].exit_code is None]
        asked = min((self._dump_asked[r][0] for r in live if r in self._dump_asked), default=None)
        for r, t in view.items():
            if t is not self.tracks[r]:
                t.seen_t = self.tracks[r].seen_t
                if asked is not None and t.pending is not None and t.pending.get("lens") == "flight":
                    t.seen_t = asked if t.seen_t is None else min(t.seen_t, asked)  # a call only a dump shows
        return view

    def _dump_path(self, rank: int) -> str:
        return rundir.flight(self.dir, rank)  # `sandbox.trace.recorder` writes it

    def _fresh_dumps(self) -> bool:
        """May the live ranks' dumps join the view? A dump is a snapshot taken when it was asked for; once a rank
        has written trace lines since, its dump is behind its trace (a call it shows running has returned, later
        calls are missing, sequence numbers differ), and a view made of both never held at any one moment. Stale
        dumps stay out until the traces are quiet again and fresh ones are asked for."""
        for t in self._live():
            if os.path.exists(self._dump_path(t.rank)):
                asked = self._dump_asked.get(t.rank)
                if asked is None or asked[1] != self._read_lines.get(t.rank, 0):
                    return False
        return True

    def _ask_flight(self, live: list[RankTrack], wait: float = FLIGHT_WAIT_S) -> None:
        """SIGUSR2 to every live rank: its recorder thread dumps the recorder (`sandbox.trace.recorder`), even while
        the rank is blocked in a collective. Waits, bounded, for the new dumps."""
        self._await_flight(self._signal_flight(live), wait)

    def _signal_flight(self, live: list[RankTrack]) -> tuple[dict, dict, tuple]:
        """Send the ranks SIGUSR2; returns what `_await_flight` needs to see their new dumps."""
        self._parse()
        live = [t for t in live if t.pid and t.hello and t.hello.get("flight")]  # armed: SIGUSR2 is theirs
        paths = {t.rank: self._dump_path(t.rank) for t in live}
        before = {r: os.stat(p).st_mtime_ns if os.path.exists(p) else 0 for r, p in paths.items()}
        read = (time.time(), {r: self._read_lines.get(r, 0) for r in paths})  # before the signal: dumps come after
        for t in live:
            if t.pid:
                try:
                    os.kill(t.pid, signal.SIGUSR2)
                except ProcessLookupError:  # it ended on its own meanwhile: its own dump is there
                    paths.pop(t.rank, None)
        return paths, before, read

    def _await_flight(self, asked: tuple[dict, dict, tuple], wait: float) -> None:
        paths, before, (when, read) = asked
        deadline = time.monotonic() + wait

        def new(r: int, p: str) -> bool:
            return os.path.exists(p) and os.stat(p).st_mtime_ns != before[r]
        while paths and time.monotonic() < deadline:
            if all(new(r, p) for r, p in paths.items()):
                break
            time.sleep(0.01)
        for r, p in paths.items():
            if new(r, p):  # taken after the signal, when the rank had written no more than `read[r]` lines
                self._dump_asked[r] = (when, read[r])

    def _calls_of(self, rank: int) -> int:
        """How many traced calls `rank` has entered (for a fault that waits for a rank's k-th call)."""
        self._parse()
        return faults.calls_entered(self.tracks[rank])

    def _live(self) -> list[RankTrack]:
        return [t for t in self.tracks.values() if t.exit_code is None]

    @property
    def _over(self) -> bool:
        return self.channel.eof or self.zygote_done or self.fatal is not None or not self._live()

    # ------------------------------------------------------------------------------------------- the watchdog
    def _watch(self) -> None:
        start = last_change = time.monotonic()
        fail_t = None
        asked, asked_on_failure = start, False
        while not self._over:
            if self.held:
                log.info("interrupted (signal %d): stopping the run", self.held[0])
                self._stop(INTERRUPTED)
                return
            if self._pump(POLL_S, parse=False):
                last_change = time.monotonic()
            if self.schedule is not None and self.schedule.faults:
                self.schedule.poll(time.monotonic() - start, self._calls_of)
            if self._over:
                break
            now = time.monotonic()
            if fail_t is None and any(t.exit_code not in (None, 0) for t in self.tracks.values()):
                fail_t = now
            blocked = all(self._may_block(t) for t in self._live())
            quiet = now - last_change >= self.settings.hang_after and now - asked >= self.settings.hang_after
            if fail_t is None and not blocked and now - start <= self.settings.timeout and not quiet:
                continue
            self._parse()
            # while the view takes calls from dumps, they are true only as of when they were asked for: ask again,
            # blocked or not, once the traces are quiet (dumps behind the traces are left out of the view meanwhile)
            on_dumps = quiet and any(os.path.exists(self._dump_path(t.rank)) for t in self._live())
            if (not blocked or on_dumps) and (quiet or (fail_t is not None and not asked_on_failure)):
                # the traces are quiet, or a rank failed: some ranks may be blocked where the tracer cannot see
                # (a collective made in C++, such as DDP's gradient all_reduce): ask their Flight Recorders
                self._ask_flight(self._live())
                asked, asked_on_failure = time.monotonic(), fail_t is not None
            view = self._view(watching=True)
            d = policy.decide(view, time.time(), elapsed=now - start, quiet_s=now - last_change,
                              failed_since=None if fail_t is None else now - fail_t, settings=self.settings)
            if d is not None and view is not self.tracks:
                d = dataclasses.replace(d, provable=False)  # the confirmation step reads the tracer's tracks alone
            if d is not None and d.provable and not self._still_provable(d):
                last_change = time.monotonic()
                continue
            if d is not None:
                log.info("stopping the run: %s", d.reason)
                self.detect_s = d.blocked_s if d.stop == policy.HANG else None
                self._stop(d.stop, stacks_taken=d.provable)
                return

    def _still_provable(self, d: policy.Decision) -> bool:
        """A deadlock the traces prove: take the stacks, then check the ranks are still in the very same calls
        (if one returned meanwhile, the stacks taken are stale and the watch goes on)."""
        log.info("%s: confirming while the stacks are taken", d.reason)
        blocked = {t.rank: t.pending["id"] for t in self._live() if t.pending is not None}
        self._ask_stacks([t for t in self._live() if t.pid], STACK_WAIT_S)
        if self._confirmed(blocked):
            return True
        log.info("%s, but a call returned while the stacks were taken: watching on", d.reason)
        self.stack_from = {r: os.path.getsize(p) for r in self.tracks
                           if os.path.exists(p := rundir.stack(self.dir, r))}
        return False

    def _confirmed(self, blocked: dict[int, int]) -> bool:
        """After a provable deadlock was named: are the ranks still inside the very calls they were in? gloo may yet
        pair two calls the traces call different (a barrier with a one-element all_reduce), and a loaded machine
        may hold back an exit line; taking the stacks gives them that time, and the traces are read again."""
        self._pump(0)
        return all(t.exit_code is None and t.pending is not None and t.pending["id"] == blocked.get(t.rank)
                   and not t.inflight for t in self.tracks.values() if t.rank in blocked)
