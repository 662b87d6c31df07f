"""The sandbox's own way of starting a run's processes (`sandbox._run.procs`): a zygote, cold (a new process that
imports torch) or forked from this process's warm one (`sandbox.warm`), forks every rank and reports on its pipe
(`sandbox.channel`) each rank's pid and exit status. The zygote and its ranks form one process group: the sandbox
ends them all with one signal. The ranks' traces are read as they grow; while every rank is busy in its own code
only each rank's last line is looked at, and the traces are parsed when the policy is asked."""
from __future__ import annotations

import dataclasses
import logging
import os
import pickle
import signal
import subprocess
import time

from sandbox import defaults, events, preload, rundir
from sandbox import warm as zygotes
from sandbox._run.options import UsageError
from sandbox._run.procs import Procs
from sandbox._run.start import ranks_env
from sandbox._run.watch import INTERRUPTED
from sandbox.channel import Channel
from sandbox.events import RankTrack, Tail

log = logging.getLogger("sandbox.launcher")

REAP_WAIT_S = 5.0           # how long the zygote gets to report every rank's exit
REAP_WAIT_INTERRUPTED_S = 0.2
ZYGOTE_EXIT_S = 2.0         # how long a SIGKILLed zygote gets to be gone


class ZygoteProcs(Procs):
    """`spec`: what the zygote runs (`sandbox._zygote`); `warm`: fork it from the warm zygote; `env_extra`,
    `env_unset`: the ranks' environment; `on_output(rank, line)`: every line a rank prints, as it prints it."""

    AFTER_KILL = ": its ranks with it"

    def __init__(self, life, spec: dict, *, warm: bool, env_extra: dict, env_unset: tuple = (), on_output=None):
        super().__init__(life)
        self.spec, self.warm, self.env_extra, self.env_unset = spec, warm, env_extra, env_unset
        self.on_output = on_output
        n = life.n
        self.ranks = {r: RankTrack(r) for r in range(n)}
        self.tails = {r: Tail(rundir.trace(life.dir, r)) for r in range(n)}
        self.raw: dict[int, list[bytes]] = {r: [] for r in range(n)}
        self.last: dict[int, bytes] = {r: b"" for r in range(n)}
        self.read: dict[int, int] = {r: 0 for r in range(n)}
        self.log_tails = {r: Tail(rundir.log(life.dir, r)) for r in range(n)} if on_output else {}
        self.proc: zygotes.Handle | None = None
        self.channel: Channel | None = None
        self.fatal: dict | None = None
        self.zygote_done = False

    # ------------------------------------------------------------------------------------------- start
    def start(self) -> None:
        life = self.life
        if life.cluster is not None:
            self.spec["nodes"] = [dataclasses.asdict(n) for n in life.cluster.nodes]
        env = ranks_env(self.env_extra, self.spec["gpu"], life.dir, life.owns_dir, self.env_unset,
                        nodes=bool(self.spec["nodes"]))
        if "PYTHONHASHSEED" in (self.spec.get("env") or {}):  # asked for with env=: the zygote's seed (a cold
            env["PYTHONHASHSEED"] = self.spec["env"]["PYTHONHASHSEED"]  # one; a warm one keeps its own, one for all)
        env[defaults.HASH_SEEDS_ENV] = str(defaults.hash_seeds(env, life.n))
        listed = (self.spec.get("env") or {}).get(defaults.HASH_SEED_LIST_ENV)
        if listed:  # an explored schedule's own seeds: zygotes of their own, started for this run
            seeds = listed.split(",")[:max(1, life.n)]
            self.warm = False
            env.update({"PYTHONHASHSEED": seeds[0], defaults.HASH_SEEDS_ENV: str(len(seeds)),
                        defaults.HASH_SEED_LIST_ENV: ",".join(seeds)})
        spec_path = os.path.join(life.dir, rundir.SPEC)
        with open(spec_path, "wb") as f:  # a file, not a pipe: writing it can never block on the zygote
            pickle.dump(self.spec, f)
        log_path = os.path.join(life.dir, rundir.ZYGOTE_LOG)
        if self.warm:
            # whether its code needs the preload: the warm zygote imports it for later runs once one has
            code = (self.spec["target"], self.spec.get("preload") or ())
            self.proc = zygotes.fork_run(env, spec_path, log_path, interrupted=lambda: bool(life.held),
                                         preload=preload.needed(*code), libraries=preload.libraries(*code))
            log.info("run forked by the warm zygote (pid %d) for %d ranks, run directory %s", self.proc.pid, life.n,
                     life.dir)
        else:
            env["SANDBOX_SPEC"] = spec_path
            self.proc = zygotes.cold(env, log_path)
            log.info("zygote started (pid %d) for %d ranks, run directory %s", self.proc.pid, life.n, life.dir)
        self.pgid, self.started = self.proc.pid, True
        self.channel = Channel(self.proc.fd)

    # ------------------------------------------------------------------------------------------- reading
    def _messages(self, wait: float) -> None:
        for msg in self.channel.poll(wait):
            if "pid" in msg and "rank" in msg:
                self.ranks[msg["rank"]].pid = msg["pid"]  # in the order the zygotes fork them (one per hash seed)
                if all(t.pid is not None for t in self.ranks.values()):
                    log.info("ranks forked: pids %s", [t.pid for t in self.ranks.values()])
            elif "exit" in msg:
                t = self.ranks[msg["exit"]]
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

    def poll(self, wait: float) -> bool:
        """Read what the zygote and the ranks wrote; True if a trace grew. Trace lines are kept unparsed: while
        the ranks run, the watch looks at each rank's last line alone (`may_block`)."""
        self._messages(wait)
        grew = False
        for r, tail in self.tails.items():
            seen = time.time()
            lines = tail.lines()
            self.ranks[r].seen_t = seen  # read to its end: the track is true at least as of then
            if lines:
                grew = True
                self.raw[r].extend(lines)
                self.last[r] = lines[-1]
                self.read[r] += len(lines)
        for r, tail in self.log_tails.items():
            for line in tail.lines():
                self.on_output(r, line.decode(errors="replace"))
        return grew

    def _parse(self) -> None:
        for r, lines in self.raw.items():
            t = self.ranks[r]
            for line in lines:
                ev = events.parse(line)
                if ev is not None:
                    t.feed(ev)
            lines.clear()

    def lines_read(self, rank: int) -> int:
        return self.read[rank]

    def tracks(self, parse: bool = True) -> dict[int, RankTrack]:
        if parse:
            self._parse()
        return self.ranks

    def may_block(self, t: RankTrack) -> bool:
        """Is rank t perhaps inside a call? Its last trace line tells, except after a `done` line (an NCCL call
        finished on the GPU while later ones may still be in flight): then its parsed track tells."""
        last = self.last[t.rank]
        if events.is_done(last):
            self._parse()
            return t.pending is not None
        return events.may_block(last)

    def pending_call(self, t: RankTrack) -> dict | None:
        """The call of rank t's last trace line, when that is the enter of a call still running (one line parsed;
        after an in-flight or `done` line, None: the parsed track would be needed)."""
        last = self.last[t.rank]
        return events.parse(last) if events.is_enter(last) else None

    def over(self, elapsed: float) -> bool:
        return self.channel.eof or self.zygote_done or self.fatal is not None or all(
            t.exit_code is not None for t in self.ranks.values())

    # ------------------------------------------------------------------------------------------- end, reap, close
    def end(self, live: list[RankTrack], why: str | None) -> None:
        """Every rank frozen first, then killed one by one (so the zygote reaps each and reports its exit status):
        a rank still running while a peer dies sees the connection close and prints gloo's error about it."""
        for t in live:  # ended by us, or (not forked yet) never to start
            t.ended_by_sandbox = True
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            self.signal(live, sig)
        if why == INTERRUPTED:
            self._kill()  # the user wants out: the zygote too, even if it is still starting or forking

    def _kill(self) -> None:
        """End the run's whole process group: the zygote, the ranks, and anything the ranks started."""
        if self.proc is None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):  # the group is already empty (PermissionError: macOS says so)
            pass

    def reap(self) -> None:
        """Wait (bounded) for the zygote to report every exit, then make sure nothing of ours remains. A run the
        zygote refused (a usage error: --gpu without GPUs) is that error, in one sentence."""
        if self.proc is None:
            return
        held = self.life.held
        deadline = time.monotonic() + (REAP_WAIT_INTERRUPTED_S if held else REAP_WAIT_S)
        while not (self.channel.eof or self.zygote_done) and time.monotonic() < deadline:
            self._messages(0.05)
            if self.proc.poll() is not None:
                self._messages(0)
                break
            if held and deadline - time.monotonic() > REAP_WAIT_INTERRUPTED_S:
                deadline = time.monotonic() + REAP_WAIT_INTERRUPTED_S
        self._kill()
        try:
            self.proc.wait(timeout=ZYGOTE_EXIT_S)
        except subprocess.TimeoutExpired:  # SIGKILL cannot be refused; only an unkillable (D-state) process stays
            log.info("the zygote did not exit within %g s of SIGKILL", ZYGOTE_EXIT_S)
        self._kill()  # anything the ranks forked stays in our process group: end it too
        log.info("run's process group %d ended", self.proc.pid)
        if self.fatal is not None and self.fatal.get("usage"):
            raise UsageError(self.fatal["fatal"])

    def close(self) -> None:
        self._kill()
        if self.proc is not None:
            if self.proc.poll() is None:
                try:
                    self.proc.wait(timeout=ZYGOTE_EXIT_S)
                except subprocess.TimeoutExpired:  # see reap: nothing more can be done to a SIGKILLed process
                    pass
            self.proc.close()
        for tail in list(self.tails.values()) + list(self.log_tails.values()):
            tail.close()

    # ------------------------------------------------------------------------------------------- the result
    def final(self) -> dict[int, RankTrack]:
        self.poll(0)
        self._note_early_death()
        return self.tracks()

    def _note_early_death(self) -> None:
        """Ranks that never reported an exit, a zygote that never said done, nobody stopped them: the zygote died."""
        lost = [t.rank for t in self.ranks.values() if t.exit_code is None and not t.ended_by_sandbox]
        if self.fatal is None and self.life.stopped_for is None and lost and not self.zygote_done:
            zlog = self._zygote_log(4000).strip().splitlines()
            last = zlog[-1] if zlog else "no message"
            self.fatal = {"fatal": f"the process that starts the ranks died early ({last})",
                          "traceback": "\n".join(zlog[-40:])}

    def _zygote_log(self, cap: int = 1 << 20) -> str:
        return events.read_text(os.path.join(self.life.dir, rundir.ZYGOTE_LOG), cap)

    def start_failure(self) -> dict | None:
        return None if self.fatal is None else {**self.fatal, "log": self._zygote_log()}

    def output(self, t: RankTrack) -> str:
        out = super().output(t)
        if not out and t.hello is None and t.exit_code not in (None, 0):
            # it failed before it could open its own log: what it said went to the zygote's
            return self._zygote_log()
        return out
