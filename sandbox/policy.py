"""The one judge: when to stop watching a run (`decide`) and what the run came to (`judge`).

Both are pure functions of the ranks' tracks (and the clock, for `decide`): `sandbox.launcher` asks them while a run
is live, `python -m sandbox.diagnose DIR` asks `judge` about a directory of traces brought home from torchrun, and
the tests ask them about recorded traces. The same traces get the same verdict either way.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from sandbox import contracts
from sandbox.diagnose import (blocked_call, diagnose_failure, diagnose_hang, diagnose_interrupted, diagnose_timeout,
                              lost_peer, progress_possible, provable_deadlock)
from sandbox.events import RankTrack
from sandbox.result import Diagnosis, Kind, Verdict


@dataclass(frozen=True)
class Settings:
    """The watchdog's knobs, in seconds."""
    hang_after: float = 1.0      # every live rank blocked in calls nobody can complete for this long: a hang
    settle: float = 0.1          # a provable deadlock is named once no trace has changed for this long
    peer_report: float = 0.3     # after a rank failed, its blocked peers get this long to report what they saw
    timeout: float = 300.0       # the whole run


HANG, FAILURE, TIMEOUT = "hang", "failure", "timeout"  # why the sandbox stops a run
INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM: the run's verdict is that


def blocked_for(tracks: dict[int, RankTrack], now: float) -> float:
    """How long every live rank has been inside a distributed call, as far as the view shows (0 if one is not).

    A rank is known to be in its call only up to when its state was read (`RankTrack.seen_t`): a running rank may have
    left the call since, and a view that took seconds to build, or a recorder dump asked for a while ago, says
    nothing of that time. Where `seen_t` is not set (offline), up to `now`."""
    live = [t for t in tracks.values() if t.exit_code is None]
    if not live or any(t.pending is None for t in live):
        return 0.0
    return min((now if t.seen_t is None else min(now, t.seen_t)) - t.pending["t"] for t in live)


@dataclass(frozen=True)
class Decision:
    stop: str            # HANG, FAILURE or TIMEOUT
    reason: str          # for the log: which rule fired
    blocked_s: float = 0.0
    provable: bool = False  # named before the grace period: the launcher confirms it once the stacks are taken


def decide(tracks: dict[int, RankTrack], now: float, *, elapsed: float, quiet_s: float,
           failed_since: float | None, settings: Settings) -> Decision | None:
    """Should the watchdog stop the run now? None means keep watching.

    now: time.time() (the clock of the trace events); elapsed: seconds since the run started; quiet_s: seconds
    since any trace last changed; failed_since: seconds since the first rank exited non-zero (None if none has).

    A hang is only concluded from a view that holds at one moment: no trace changed for `settle` (the traces were
    read again and nothing had moved; a view read while a rank moved can show it behind calls its peers could not
    have finished without it), and every rank blocked for `hang_after` by the time its state was read (`blocked_for`).
    """
    live = [t for t in tracks.values() if t.exit_code is None]
    blocked = blocked_for(tracks, now)
    if failed_since is not None:
        # give the peers a moment to report what they saw, then end the ones that are stuck
        if live and (failed_since >= settings.hang_after or blocked >= min(settings.peer_report, settings.hang_after)):
            return Decision(FAILURE, f"a rank failed {failed_since:.2f} s ago; ending the ranks still running")
    elif live and blocked > 0 and not progress_possible(tracks):
        if blocked >= settings.hang_after and quiet_s >= settings.settle:
            return Decision(HANG, f"every live rank blocked for {blocked:.2f} s in calls nobody can complete", blocked)
        if quiet_s >= settings.settle and provable_deadlock(tracks):
            return Decision(HANG, f"provable deadlock, {blocked:.2f} s after the last rank blocked", blocked, True)
    if elapsed > settings.timeout:
        return Decision(TIMEOUT, f"the {settings.timeout:g} s timeout passed")
    return None


def outcome(t: RankTrack, stopped_for: str | None) -> str:
    """ok | error | hung | crashed | stopped, from a rank's track and why the run was stopped (None: it was not
    stopped by the sandbox; offline, a rank left inside a call when its launcher ended the job is hung)."""
    if t.ended_by_sandbox:
        # blocked_call: a rank whose stuck call raised only because a peer went away as the sandbox ended the run
        # (ranks are ended one after another) was as hung as the others: judged as from its files offline
        if blocked_call(t) is not None and stopped_for in (HANG, TIMEOUT, INTERRUPTED):
            return "hung"
        if t.end is None or t.pending is not None:
            return "stopped"
        # its own code had ended (its end record is written) and it was running its exit handlers when the sandbox
        # ended it (a loaded machine can take over a second there): the end record decides, as offline, where
        # the sandbox's ending is not known
    if t.error is not None:
        return "error"
    if t.pid is not None and not t.ended_by_sandbox:  # live: the exit status decides
        return "ok" if t.exit_code == 0 else "stopped" if t.exit_code is None else "crashed"
    if t.end is not None:  # offline, or ended while it exited: the end record decides
        return "ok" if t.end.get("outcome") == "ok" else "crashed"
    return "hung" if t.pending is not None else "crashed"  # no end: killed inside a call, or died in its own code


@dataclass
class Judgement:
    verdict: Verdict
    diagnosis: Diagnosis
    outcomes: dict[int, str] = field(default_factory=dict)
    warnings: list = field(default_factory=list)  # sandbox.contracts.ContractWarning


def judge(tracks: dict[int, RankTrack], stopped_for: str | None = None, *, timeout: float | None = None,
          blocked_s: float | None = None) -> Judgement:
    """The verdict (ok | error | hang | crash | timeout | interrupted), the diagnosis, each rank's outcome, and the
    contract warnings of the calls that completed (`sandbox.contracts`), whatever the verdict.

    tracks: every rank's track, process facts included where known; stopped_for: why the sandbox stopped the run
    (HANG, FAILURE, TIMEOUT, INTERRUPTED) or None; timeout: the run's limit (for the wording).
    """
    j = _judge(tracks, stopped_for, timeout=timeout, blocked_s=blocked_s)
    j.warnings = contracts.breaches(tracks)
    if j.verdict != Verdict.OK:
        j.diagnosis = contracts.explain(j.diagnosis, j.warnings, tracks)
    return j


def _judge(tracks: dict[int, RankTrack], stopped_for: str | None = None, *, timeout: float | None = None,
           blocked_s: float | None = None) -> Judgement:
    """The verdict, the diagnosis and each rank's outcome (see judge)."""
    outcomes = {r: outcome(t, stopped_for) for r, t in sorted(tracks.items())}
    if stopped_for is None and "hung" in outcomes.values():
        # offline, with ranks killed inside their calls: an error that only says a peer went away, raised in the
        # call the rank was stuck in, is the launcher tearing the hung job down (torchrun ends every worker once
        # one is stopped), not a cause: that rank was hung too. So is one killed after that call's exit line and
        # before its own error record (no end: it reads as died in its own code), if that call was its last
        for r, t in tracks.items():
            last = outcomes[r] == "crashed" and _last_call_id(t) == (t.failed_call or {}).get("id")
            if t.pid is None and t.failed_call is not None and lost_peer(t) and (outcomes[r] == "error" or last):
                outcomes[r] = "hung"
    vals = set(outcomes.values())
    if stopped_for == INTERRUPTED:
        return Judgement(Verdict.INTERRUPTED, diagnose_interrupted(tracks), outcomes)
    if stopped_for is None and "hung" in vals and not vals & {"error", "crashed"}:
        # offline: ranks left inside calls when the job was ended, and none failed on its own: a hang. (A rank
        # that died outside any call is the cause, as it is live: a crash, with the waiting ranks as its peers.)
        return Judgement(Verdict.HANG, diagnose_hang(tracks), outcomes)
    if "crashed" in vals:
        return Judgement(Verdict.CRASH, diagnose_failure(tracks, outcomes), outcomes)
    if "error" in vals:
        return Judgement(Verdict.ERROR, diagnose_failure(tracks, outcomes), outcomes)
    if stopped_for == HANG:
        d = diagnose_hang(tracks)
        if blocked_s is not None:
            d = replace(d, details={**d.details, "blocked_for_s": round(blocked_s, 3)})
        return Judgement(Verdict.HANG, d, outcomes)
    if stopped_for == TIMEOUT:
        return Judgement(Verdict.TIMEOUT, diagnose_timeout(tracks, timeout or 0), outcomes)
    if vals <= {"ok"}:
        return Judgement(Verdict.OK, Diagnosis(kind=Kind.NONE, cause=f"All {len(tracks)} ranks finished."), outcomes)
    return Judgement(Verdict.ERROR, Diagnosis(kind=Kind.NONE, cause="The run ended without every rank finishing, and without a cause"
                                                " the traces show."), outcomes)


def _last_call_id(t: RankTrack):
    """The id of the last call this rank entered, or None."""
    return next((e.get("id") for e in reversed(t.events) if e.get("ev") == "enter"), None)


def fill_missing(tracks: dict[int, RankTrack]) -> dict[int, RankTrack]:
    """Offline: a rank that the others' hello says exists but that left no trace (it never started tracing)."""
    ws = max([t.hello.get("world_size", 0) for t in tracks.values() if t.hello] + [len(tracks)])
    for r in range(ws):
        tracks.setdefault(r, RankTrack(r))
    return tracks
