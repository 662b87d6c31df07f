"""How a run's processes are started and ended, behind one interface: the shape of torchelastic's `PContext`
(torch/distributed/elastic/multiprocessing/api.py: start, poll, signal, close). The run's lifecycle
(`sandbox._run.lifecycle`) watches, asks, stops and assembles the same way whoever started the ranks; a backend
only says how its processes start, what it knows of them, and how they end. Two backends:

- `sandbox._run.zygote.ZygoteProcs`: the sandbox's own launcher; a zygote that imported torch forks every rank and
  reports each pid and exit status on a pipe.
- `sandbox.agents.TorchrunProcs`: torchrun's elastic agent on every simulated node; the sandbox knows a worker only
  from its trace (its pid in its hello), and a failed worker is torchrun's to restart.
"""
from __future__ import annotations

import os

from sandbox import calls, events, rundir
from sandbox._proc import alive
from sandbox.events import RankTrack


def pid_of(t: RankTrack) -> int | None:
    """A rank's process: as its launcher reported it (the zygote), else as its trace says (torchrun's workers)."""
    return t.pid or (t.hello or {}).get("pid")


class Procs:
    """One way of starting a run's processes. `life` is the run's lifecycle: its directory (`life.dir`), world size
    (`life.n`), topology, nodes (`life.cluster`) and the signals held (`life.held`). Called in this order:
    `start`; `poll` (and the readers) until `over`; maybe `end`; `reap`; `final`; `close`, always."""

    POLL_S = 0.02         # how often the lifecycle looks
    AFTER_KILL = ""       # what became of a node the sandbox killed, in words (the report says it)
    pgid: int | None = None  # the process group the run's processes are in, where there is one

    def __init__(self, life):
        self.life = life
        self.started = False

    # ------------------------------------------------------------------------------------------- start, poll
    def start(self) -> None:
        raise NotImplementedError

    def on_kill(self, node: int) -> None:
        """Right after the sandbox killed a node (a fault): what this launcher does about it (torchrun's: the node
        comes back with a fresh agent)."""

    def poll(self, wait: float) -> bool:
        """Read what the processes and their traces said (waiting up to `wait` s for it); True if a trace grew."""
        raise NotImplementedError

    def over(self, elapsed: float) -> bool | str:
        """Whether the run is over by itself: False, True, or a sentence saying why the processes left must be
        ended without a verdict of the sandbox's own (torchrun's agents left waiting for a job that is over)."""
        raise NotImplementedError

    def tracks(self, parse: bool = True) -> dict[int, RankTrack]:
        """Every rank's track now, process facts included. `parse=False`: the cheap view (exit statuses only)."""
        raise NotImplementedError

    def lines_read(self, rank: int) -> int:
        """How many trace lines of the rank have been read so far (a recorder dump asked for when fewer had been is
        behind the rank's trace)."""
        raise NotImplementedError

    def watched(self, tracks: dict[int, RankTrack]) -> dict[int, RankTrack]:
        """The tracks (merged with the recorders') as the hang rule must see them while the run goes on."""
        return tracks

    def may_block(self, t: RankTrack) -> bool:
        """Cheap: may rank t be inside a distributed call?"""
        return t.pending is not None

    def pending_call(self, t: RankTrack) -> dict | None:
        """Cheap: the call rank t is inside, as far as `may_block` knows it (None where it cannot tell)."""
        return t.pending

    def in_one_call(self, live: list[RankTrack]) -> bool:
        """Are the live ranks all inside one and the same collective, of a group made of exactly them? Then none of
        them waits for a rank that is elsewhere: they are meeting, not stuck, and no rule of the judge can prove
        otherwise while the traces move (a loop of collectives is there about half of the time). Quiet traces, a
        failure or the time limit are looked at whatever this says."""
        got = {t.rank: self.pending_call(t) for t in live}
        ps = list(got.values())
        if len(ps) < 2 or any(p is None or p.get("op") == "wait" or not calls.is_collective(p) for p in ps):
            return False
        first = ps[0]
        return (all((p.get("gname"), p.get("seq")) == (first.get("gname"), first.get("seq")) for p in ps)
                and sorted(first.get("group") or ()) == sorted(got) and not calls.disagreements(got, calls.FULL))

    # ------------------------------------------------------------------------------------------- signal, end
    def gone(self, rank: int) -> bool:
        """Has the rank's process ended (none left, or a zombie), whether or not its launcher has said so yet? A rank
        that failed ends at once, and the first to fail makes the watch ask the others for their dumps: those that
        ended meanwhile never answer, and a wait for them would run out its bound (0.5 s added to every run that
        ended in an error)."""
        t = self.tracks(parse=False).get(rank)
        pid = pid_of(t) if t is not None else None
        return pid is not None and not alive(pid)

    def signal(self, ranks: list[RankTrack], sig: int) -> list[int]:
        """Send `sig` to each rank's process; returns the ranks it reached."""
        reached = []
        for t in ranks:
            pid = pid_of(t)
            if not pid:
                continue
            try:
                os.kill(pid, sig)
            except ProcessLookupError:  # it ended on its own meanwhile: nothing to ask
                continue
            reached.append(t.rank)
        return reached

    def end(self, live: list[RankTrack], why: str | None) -> None:
        """End the run's processes now: the sandbox stops the run (`why`: the stop's reason). `live`: the ranks
        that had not ended when it decided, the ones it ends."""
        raise NotImplementedError

    def reap(self) -> None:
        """Wait, bounded, until every exit is known (or nothing more can be learned)."""

    def close(self) -> None:
        """Nothing of the run's processes may remain; bounded, idempotent."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- the result
    def final(self) -> dict[int, RankTrack]:
        """Every rank's track for the verdict, with what only the launcher knows (exit statuses, who it killed)."""
        raise NotImplementedError

    def start_failure(self) -> dict | None:
        """Why the ranks could not start at all ({"fatal": sentence, "traceback": ...}), if so."""
        return None

    def output(self, t: RankTrack) -> str:
        """What rank t printed."""
        return events.read_text(rundir.log(self.life.dir, t.rank))

    def after_node_failure(self) -> str:
        """A sentence on what this launcher did about a node that died and ended the run ('' for none)."""
        return ""

    def noted(self, diag, verdict: str):
        """The diagnosis with what only this launcher can say added (torchrun's restarts, say)."""
        return diag

