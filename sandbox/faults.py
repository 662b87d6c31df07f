"""Faults injected into simulated nodes from outside, as a real one strikes: a node killed (every process on it), a
link down for a while. Both launchers use this: the sandbox's own (`launch(..., nnodes=K, faults=[...])`) and
torchrun's (`sandbox.agents`). A fault fires at a time into the run or when a rank enters its k-th traced call; each
one fired is a record (`Injected`) that the report states, the timeline draws, and the diagnosis blames when the run
did not get over it (`node_failure`). Torch-free; the nodes themselves are `sandbox.nodes`'.
"""
from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass, field
from typing import Callable

from sandbox import words
from sandbox.result import Diagnosis, Kind
from sandbox.topology import Topology, hostname

FORM = re.compile(r"^(\d+)@(?:(\d+(?:\.\d+)?)s|rank(\d+):(\d+))(?:\+(\d+(?:\.\d+)?)s)?$")
KINDS = ("kill", "link-down")


@dataclass(frozen=True, kw_only=True)
class Fault:
    """kind: "kill" (every process on the node) or "link-down" (the node's link, for `for_s` seconds; its end is a
    "link-up" the schedule adds itself). When: `at_s` seconds into the run, or when rank `at_call[0]` enters its
    `at_call[1]`-th traced call."""
    kind: str
    node: int
    at_s: float | None = None
    at_call: tuple[int, int] | None = None
    for_s: float | None = None

    def when(self, call: int | None = None) -> str:
        """When it fires, in words; `call`: the call its rank had reached when the sandbox saw it due (the traces
        are read every tenth of a second: a rank busy in short calls may be past the one asked for)."""
        return f"at {self.at_s:g} s" if self.at_s is not None else \
            f"when rank {self.at_call[0]} entered its call {call or self.at_call[1]}"


def parse(kind: str, text: str) -> Fault:
    """`NODE@3s`, `NODE@rank2:5` (rank 2's 5th call), and for link-down a duration: `NODE@3s+5s`. ValueError in one
    sentence otherwise (the option's name as the command line spells it: --kill-node, --link-down)."""
    m = FORM.match(text.strip())
    if kind not in KINDS or m is None or (kind == "link-down") != (m.group(5) is not None) or (
            m.group(4) and int(m.group(4)) < 1):
        form = "NODE@3s+5s (down at 3 s, for 5 s)" if kind == "link-down" else "NODE@3s or NODE@rank2:5"
        raise ValueError(f"a --{'kill-node' if kind == 'kill' else kind} fault reads {form}, not {text!r}.")
    return Fault(kind=kind, node=int(m.group(1)), at_s=float(m.group(2)) if m.group(2) else None,
                 at_call=(int(m.group(3)), int(m.group(4))) if m.group(3) else None,
                 for_s=float(m.group(5)) if m.group(5) else None)


def _seconds(v, low: float, above: bool = False) -> bool:
    """Is v a finite number of seconds, at least `low` (more than it, with `above`)?"""
    ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    return ok and (v > low if above else v >= low)


def check(faults: list[Fault], nnodes: int, world: int) -> str | None:
    """One sentence if a fault is not one the run can inject (an unknown kind, no single time, a link-down with no
    duration) or names a node or rank the run does not have, else None."""
    for f in faults:
        if not isinstance(f, Fault) or f.kind not in KINDS:
            return f"a fault is Fault(kind=...) with kind one of {', '.join(KINDS)}, not {f!r}."
        if (f.at_s is None) == (f.at_call is None) or (f.at_s is not None and not _seconds(f.at_s, 0)) or (
                f.at_call is not None and f.at_call[1] < 1):
            return f"a fault fires at_s=SECONDS (0 or more) or at_call=(RANK, CALL) (CALL from 1), one of them: {f!r}."
        # a kill has no duration at all, not even 0 s; a link-down lasts some time
        lasts = _seconds(f.for_s, 0, above=True)
        if (f.kind == "kill" and f.for_s is not None) or (f.kind == "link-down" and not lasts):
            return f"a link-down fault lasts for_s=SECONDS (more than 0), and only a link-down has a duration: {f!r}."
        if not 0 <= f.node < nnodes or (f.at_call and not 0 <= f.at_call[0] < world):
            named = f"node {f.node}" + (f" and rank {f.at_call[0]}" if f.at_call else "")
            option = "--kill-node" if f.kind == "kill" else "--link-down"
            return f"{option} names {named}, and this run has nodes 0-{nnodes - 1}, ranks 0-{world - 1}."
    return None


def calls_entered(t) -> int:
    """How many traced calls a rank (its RankTrack) has entered: call ids count from 1, in the order it made them."""
    return max((e["id"] for e in t.events if e.get("ev") == "enter" and isinstance(e.get("id"), int)), default=0)


@dataclass
class Schedule:
    """The faults still to fire, and those fired. `poll` fires what is due on `cluster` (a `sandbox.nodes.Cluster`);
    `on_kill(node)` runs right after a node was killed (torchrun's launcher starts the node's agent again there)."""
    faults: list[Fault]
    cluster: object
    after_kill: str = ""                 # words for what happened next to a killed node
    on_kill: Callable[[int], None] | None = None
    injected: list[dict] = field(default_factory=list)

    def poll(self, elapsed: float, calls_of: Callable[[int], int]) -> None:
        for f in list(self.faults):
            call = calls_of(f.at_call[0]) if f.at_call is not None else None
            due = (f.at_s is not None and elapsed >= f.at_s) or (call is not None and call >= f.at_call[1])
            if not due:
                continue
            self.faults.remove(f)
            name = hostname(f.node)
            if f.kind == "kill":
                pids = self.cluster.kill_node(f.node)
                what = f"{name} was killed {f.when(call)} ({len(pids)} processes){self.after_kill}"
                self._note(elapsed, f, what, label=f"{name} killed", pids=pids, when=f.when(call))
                if self.on_kill is not None:
                    self.on_kill(f.node)
            elif f.kind == "link-down":
                self.cluster.set_link(f.node, up=False)
                self._note(elapsed, f, f"{name}'s link went down {f.when(call)} for {f.for_s:g} s",
                           label=f"{name} link down", until=time.time() + f.for_s)
                self.faults.append(Fault(kind="link-up", node=f.node, at_s=elapsed + f.for_s))
            elif f.kind == "link-up":  # the end of a link-down, scheduled by it
                self.cluster.set_link(f.node, up=True)

    def _note(self, elapsed: float, f: Fault, what: str, **more) -> None:
        self.injected.append({"ev": "fault", "t": time.time(), "elapsed": elapsed, "node": f.node, "kind": f.kind,
                              "what": what, **more})


def node_failure(kill: dict, diag: Diagnosis, ranks: list, nodes: Topology, *, after: str = "") -> Diagnosis:
    """A node killed by the sandbox, and the run did not get over it: the dead node is the cause, whatever its peers
    did next (they lost their connections, or were ended mid-call). `ranks`: the RankResults; `nodes`: the run's
    topology; `after`: a sentence on what the launcher did about it."""
    name = hostname(kill["node"])
    # where each rank said it ran, else where the run's topology put it
    dead = [rr.rank for rr in ranks if rr.host == name] or nodes.ranks_on(kill["node"])
    peers = [rr.rank for rr in ranks if rr.rank not in dead and str(rr.outcome) != "ok"]
    cause = (f"{name.capitalize()} died: killed {kill['when']}, taking {words.ranks(dead)} with it, and the job "
             f"could not go on without them")
    cause += f"; {words.ranks(peers)} then failed or were ended, a consequence." if peers else "."
    if after:
        cause += " " + after
    return Diagnosis(kind=Kind.NODE_FAILURE, cause=cause, culprit_ranks=dead,
                     details={**diag.details, "node": name, "rules_said": diag.summary})


def stated(diag: Diagnosis, injected: list[dict], pending: list[Fault] = ()) -> Diagnosis:
    """The diagnosis with every fault that was injected said in a note (the one it already blames excepted), and
    every fault still `pending` when the run ended (it never came due)."""
    for f in injected:
        if not (f["kind"] == "kill" and diag.kind == Kind.NODE_FAILURE
                and diag.details.get("node") == hostname(f["node"])):
            diag = diag.noted(f"{f['what'][0].upper()}{f['what'][1:]}.")
    for f in pending:
        if f.kind == "link-up":
            diag = diag.noted(f"{hostname(f.node).capitalize()}'s link was still down when the run ended.")
        else:
            what = "to be killed" if f.kind == "kill" else "to lose its link"
            diag = diag.noted(f"{hostname(f.node).capitalize()} was {what} {f.when()}; the run ended first, and it "
                              f"never was.")
    return diag
