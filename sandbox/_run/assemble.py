"""A run's last step, for either launcher: read what the ranks left (logs, stack dumps, recorder dumps, return
values) and build the frozen result, by keyword, with the verdict `sandbox.policy.judge` gives. On several nodes
each rank is named with its node (the run's topology, where a rank never said), a killed node that ended the run is
the diagnosis, and every fault injected is stated. A backend adds what only it knows: ranks that could not start
(the zygote), torchrun's restarts."""
from __future__ import annotations

import dataclasses
import re
import time

from sandbox import faults, flight, flight_view, policy, rundir, words
from sandbox._run import asks
from sandbox._run.watch import INTERRUPTED
from sandbox.result import Diagnosis, Kind, RankResult, RunResult, Verdict

RANK_WORD = re.compile(r"\b[Rr]ank (\d+)\b(?! \()")  # 'rank 2', 'Rank 2' (not 'ranks 0-3', nor one already named)
# 'ranks 0 and 1', 'ranks 0-3', 'ranks 0, 2 and 5' (the forms sandbox.words.ranks writes), not one already named
RANKS_WORD = re.compile(r"\b[Rr]anks (\d+-\d+|\d+(?:, \d+)* and \d+)\b(?! \()")
QUOTED = re.compile(r"`[^`]*`")  # code the diagnosis quotes


class Assembling:
    """The assemble step of `sandbox._run.lifecycle.Lifecycle`."""

    def _value(self, rank: int) -> bytes | None:
        """What a rank left as its value (a function's return value; a catalogue variant's under torchrun)."""
        try:
            with open(rundir.result(self.dir, rank), "rb") as f:
                return f.read()
        except FileNotFoundError:  # a script's rank: scripts return nothing
            return None

    def _named(self, diag: Diagnosis, ranks: list[RankResult], verdict: str) -> Diagnosis:
        """Several nodes: the nodes named beside the ranks, and the faults injected stated (a killed node that
        ended the run is its cause)."""
        injected = self.schedule.injected if self.schedule is not None else []
        killed = [f for f in injected if f["kind"] == "kill"]
        if verdict != Verdict.OK and killed and self.stopped_for != INTERRUPTED:
            diag = faults.node_failure(killed[-1], diag, ranks, self.topology, after=self.procs.after_node_failure())
        return on_nodes(faults.stated(diag, injected, self.schedule.faults if self.schedule is not None else []),
                        ranks)

    def _assemble(self, wall: float) -> RunResult:
        tracks = self.procs.final()
        for t in tracks.values():
            t.stack = asks.read_stack(self.dir, t.rank, self.stack_from.get(t.rank))
        dumps = flight.read_run(self.dir)  # with the collectives the ranks' Flight Recorders saw (sandbox.flight)
        tracks = flight_view.merge(tracks, dumps) if dumps else tracks
        rundir.write_ended(self.dir, self.stopped_for, tracks)  # so that the offline judge has the same facts
        j = policy.judge(tracks, self.stopped_for, timeout=self.settings.timeout, blocked_s=self.detect_s)
        verdict, diag = j.verdict, j.diagnosis
        ranks = [RankResult.from_track(t, j.outcomes[r], self.procs.output(t),
                                       self._value(r) if j.outcomes[r] == "ok" else None)
                 for r, t in sorted(tracks.items())]
        fatal = self.procs.start_failure()
        if fatal is not None and self.stopped_for != INTERRUPTED:  # the ranks could not start: whatever they say
            verdict = Verdict.ERROR
            diag = Diagnosis(kind=Kind.RANK_ERROR, cause=f"The ranks could not start: {fatal['fatal']}",
                             details={"traceback": fatal.get("traceback")})
            ranks = [dataclasses.replace(rr, error={"type": "start", "message": fatal["fatal"]},
                                         output=rr.output or fatal.get("log", "")) for rr in ranks]
        if self.topology.nnodes > 1:  # a rank that never said where it ran is where the run put it
            ranks = [rr if rr.host else dataclasses.replace(rr, host=self.topology.host_of(rr.rank)) for rr in ranks]
            diag = self._named(diag, ranks, verdict)
        diag = self.procs.noted(diag, verdict)
        evs = sorted((e for t in tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
        if self.schedule is not None:
            evs += [f for f in self.schedule.injected if f.get("label")]  # what the timeline draws
        return RunResult(verdict=verdict, world_size=self.n, wall_s=wall, diagnosis=diag, ranks=ranks, events=evs,
                         run_dir=None if self.owns_dir else self.dir, pgid=self.procs.pgid,
                         ended_at=self.ended_at or time.time(), warnings=j.warnings)


def on_nodes(diag: Diagnosis, ranks: list[RankResult]) -> Diagnosis:
    """A run on several nodes: each 'rank N' the diagnosis says gets its node beside it ('rank 2 (node1)'), and its
    details map every rank to its node (both launchers use this)."""
    host = {rr.rank: rr.host for rr in ranks}
    # the ranks' own words quoted in the diagnosis (their error messages, code in backticks) stay as they are
    quoted = {q for rr in ranks if rr.error and rr.error.get("message")
              for q in (words.short(rr.error["message"]), *rr.error["message"].splitlines()) if q.strip()}

    def named(text: str) -> str:
        kept = [m.span() for m in QUOTED.finditer(text)] + [
            m.span() for q in quoted for m in re.finditer(re.escape(q.strip()), text)]

        def one(m):
            r = int(m.group(1))
            if not host.get(r) or any(a <= m.start() < b for a, b in kept):
                return m.group(0)
            return f"{m.group(0)} ({host[r]})"

        def several(m):  # one node: '(node0)'; spread: '(on node0 and node1)'
            a, _, b = m.group(1).partition("-")
            rs = range(int(a), int(b) + 1) if b else [int(x) for x in re.split(r", | and ", m.group(1))]
            hosts = sorted({host.get(r) for r in rs})
            if None in hosts or any(x <= m.start() < y for x, y in kept):
                return m.group(0)
            return f"{m.group(0)} ({hosts[0]})" if len(hosts) == 1 else f"{m.group(0)} (on {words.listed(hosts)})"
        return RANKS_WORD.sub(several, RANK_WORD.sub(one, text))
    return dataclasses.replace(diag, cause=named(diag.cause), lead=named(diag.lead),
                               notes=tuple(named(n) for n in diag.notes),
                               details={**diag.details, "nodes": {str(r): h for r, h in host.items()}})
