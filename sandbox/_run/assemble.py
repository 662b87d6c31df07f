"""A run's last step: read what the ranks left (logs, stack dumps, return values) and build the frozen result, by
keyword, with the verdict `sandbox.policy.judge` gives. A zygote that could not start the ranks makes the run an
error whatever the ranks' tracks say."""
from __future__ import annotations

import dataclasses
import os
import re
import time

from sandbox import events, faults, policy, rundir, words
from sandbox._run.watch import INTERRUPTED
from sandbox.result import Diagnosis, RankResult, RunResult

LOG_CAP = 1 << 20           # the most of a rank's log a result carries (its tail)
RANK_WORD = re.compile(r"\b[Rr]ank (\d+)\b(?! \()")  # 'rank 2', 'Rank 2' (not 'ranks 0-3', nor one already named)
# 'ranks 0 and 1', 'ranks 0-3', 'ranks 0, 2 and 5' (the forms sandbox.words.ranks writes), not one already named
RANKS_WORD = re.compile(r"\b[Rr]anks (\d+-\d+|\d+(?:, \d+)* and \d+)\b(?! \()")
QUOTED = re.compile(r"`[^`]*`")  # code the diagnosis quotes


class Assembling:
    """The assemble step of `sandbox._run.Run`."""

    def _read(self, name: str, cap: int = LOG_CAP, skip: int = 0) -> str:
        text = events.read_text(os.path.join(self.dir, name), cap)
        return text[skip:] if skip else text  # stack dumps are ASCII: bytes and characters line up

    def _note_early_death(self) -> None:
        """Ranks that never reported an exit, a zygote that never said done, nobody stopped them: the zygote died."""
        lost = [t.rank for t in self.tracks.values() if t.exit_code is None and not t.ended_by_sandbox]
        if self.fatal is None and self.stopped_for is None and lost and not self.zygote_done:
            zlog = self._read(rundir.ZYGOTE_LOG, 4000).strip().splitlines()
            last = zlog[-1] if zlog else "no message"
            self.fatal = {"fatal": f"the process that starts the ranks died early ({last})",
                          "traceback": "\n".join(zlog[-40:])}

    def _rank_results(self, outcomes: dict) -> list[RankResult]:
        zlog = None
        ranks = []
        for r, t in sorted(self.tracks.items()):
            value = None
            path = rundir.result(self.dir, r)
            if outcomes[r] == "ok" and os.path.exists(path):
                with open(path, "rb") as f:
                    value = f.read()
            output = events.read_text(rundir.log(self.dir, r))
            if not output and t.hello is None and t.exit_code not in (None, 0):
                # it failed before it could open its own log: what it said went to the zygote's
                zlog = self._read(rundir.ZYGOTE_LOG) if zlog is None else zlog
                output = zlog
            ranks.append(RankResult.from_track(t, outcomes[r], output, value))
        if self.fatal is not None and self.stopped_for != INTERRUPTED:
            zlog = self._read(rundir.ZYGOTE_LOG) if zlog is None else zlog
            ranks = [dataclasses.replace(rr, error={"type": "start", "message": self.fatal["fatal"]},
                                         output=rr.output or zlog) for rr in ranks]
        return ranks

    def _on_nodes(self, ranks: list[RankResult]) -> list[RankResult]:
        """Several nodes: a rank that never said where it ran (it died before its tracer started) is on the node
        the run put it on."""
        if not self.spec.get("nodes"):
            return ranks
        topo = self.spec["topology"]
        return [rr if rr.host else dataclasses.replace(rr, host=topo.host_of(rr.rank)) for rr in ranks]

    def _named(self, diag: Diagnosis, ranks: list[RankResult], verdict: str) -> Diagnosis:
        """Several nodes: the nodes named beside the ranks, and the faults injected stated (a killed node that
        ended the run is its cause)."""
        if not self.spec.get("nodes"):
            return diag
        injected = self.schedule.injected if self.schedule is not None else []
        killed = [f for f in injected if f["kind"] == "kill"]
        if verdict != "ok" and killed and self.stopped_for != INTERRUPTED:
            diag = faults.node_failure(killed[-1], diag, ranks, self.spec["topology"])
        return on_nodes(faults.stated(diag, injected, self.schedule.faults if self.schedule is not None else []),
                        ranks)

    def _assemble(self, wall: float) -> RunResult:
        self._pump(0)
        self._note_early_death()
        for t in self.tracks.values():
            t.stack = self._read(rundir.stack(self.dir, t.rank), skip=self.stack_from.get(t.rank, 0)) or None
        self.tracks = self._view()  # with the collectives the ranks' Flight Recorders saw (sandbox.flight)
        j = policy.judge(self.tracks, self.stopped_for, timeout=self.settings.timeout, blocked_s=self.detect_s)
        verdict, diag = j.verdict, j.diagnosis
        if self.fatal is not None and self.stopped_for != INTERRUPTED:
            verdict = "error"
            diag = Diagnosis(kind="rank_error", cause=f"The ranks could not start: {self.fatal['fatal']}",
                             details={"traceback": self.fatal.get("traceback")})
        evs = sorted((e for t in self.tracks.values() for e in t.events), key=lambda e: e.get("t", 0))
        if self.schedule is not None:
            evs += [f for f in self.schedule.injected if f.get("label")]  # what the timeline draws
        ranks = self._on_nodes(self._rank_results(j.outcomes))
        return RunResult(verdict=verdict, world_size=self.n, wall_s=wall, diagnosis=self._named(diag, ranks, verdict),
                         ranks=ranks, events=evs,
                         run_dir=None if self.owns_dir else self.dir, pgid=self.proc.pid if self.proc else None,
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
