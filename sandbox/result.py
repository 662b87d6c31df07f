"""What one run of N ranks came to, as plain data. `RunResult.to_dict()` is the JSON contract that docs, labs and
tools read (the README lists its fields): fields may be added, none renamed."""
from __future__ import annotations

import io
import pickle
import sys
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from sandbox import htmlview, words
from sandbox.events import RankTrack

class _Words(str, Enum):
    """A string that is also a closed set: compares, hashes, prints and serialises as its value ("hang")."""
    __str__ = str.__str__
    __format__ = str.__format__


class Verdict(_Words):
    """What a whole run came to."""
    OK = "ok"
    ERROR = "error"              # a rank raised or exited non-zero
    HANG = "hang"                # every live rank blocked in calls nobody can complete
    CRASH = "crash"              # a rank died from a signal (gloo's SIGABRT on a size mismatch)
    TIMEOUT = "timeout"          # the run's own time limit passed
    INTERRUPTED = "interrupted"  # Ctrl-C or SIGTERM


class Outcome(_Words):
    """How one rank ended."""
    OK = "ok"
    ERROR = "error"
    HUNG = "hung"
    CRASHED = "crashed"
    STOPPED = "stopped"          # ended by the sandbox because another rank failed


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """Why the run ended as it did: a kind, one sentence, and the structured facts behind it.

    The sentence a person reads (`summary`) is composed from parts kept apart here: `lead` (how the run was ended,
    when that is not the cause: a timeout, an interrupt), `cause` (what the rules found) and `notes` (what else
    explains it: a contract the failing call broke). Build a changed copy with `led_by` / `noted`."""
    kind: str
    cause: str
    culprit_ranks: list[int] = field(default_factory=list)
    op: str | None = None
    group: list[int] | None = None
    seq: int | None = None
    site: str | None = None
    details: dict = field(default_factory=dict)
    lead: str = ""
    notes: tuple[str, ...] = ()

    @property
    def summary(self) -> str:
        return " ".join(x for x in (self.lead, self.cause, *self.notes) if x)

    def led_by(self, lead: str) -> "Diagnosis":
        return replace(self, lead=lead)

    def noted(self, note: str) -> "Diagnosis":
        return replace(self, notes=(*self.notes, note))

    def to_dict(self) -> dict:
        return {"kind": self.kind, "summary": self.summary, "culprit_ranks": self.culprit_ranks, "op": self.op,
                "group": self.group, "seq": self.seq, "site": self.site, "details": self.details}


class _Unpickler(pickle.Unpickler):
    """Classes of the launching script travel as `__sandbox_main__.X` (the ranks' name for that script): here
    they are the launcher's own `__main__.X`."""

    def find_class(self, module: str, name: str):
        if module == "__sandbox_main__" and "__sandbox_main__" not in sys.modules:
            module = "__main__"
        return super().find_class(module, name)


@dataclass
class RankResult:
    rank: int
    outcome: str
    exit_code: int | None = None
    pending: dict | None = None   # the call it was inside: op, group, seq, site, func, call (in words), since, peer
    error: dict | None = None     # type, message, traceback, site (or type "exit" with the exit status in words)
    output: str = ""
    stack: str | None = None      # its Python stack (faulthandler) when the sandbox ended it
    pid: int | None = None
    value_bytes: bytes | None = field(default=None, repr=False)

    @property
    def value(self) -> Any:
        """The function's return value on this rank (None for scripts and for ranks that did not finish)."""
        if self.value_bytes is None:
            return None
        return _Unpickler(io.BytesIO(self.value_bytes)).load()

    @classmethod
    def from_track(cls, t: RankTrack, outcome: str, output: str = "", value: bytes | None = None) -> "RankResult":
        p = t.pending if outcome in ("hung", "stopped", "crashed", "error") else None
        pending = None
        if p is not None:
            pending = {"op": p["op"] if p["op"] != "wait" else p.get("of"), "group": p.get("group"),
                       "seq": p.get("seq"), "site": p.get("site"), "func": p.get("func"), "call": words.call(p),
                       "since": p.get("t")}
            if p.get("peer") is not None:
                pending["peer"] = p["peer"]
        code = t.exit_code
        if code is None and t.end is not None and t.end.get("outcome") == "exit":
            code = t.end.get("exit_code")  # offline: sys.exit(N) as the rank's own trace recorded it
        err = t.error
        if err is None and outcome == "crashed" and code is not None:
            err = {"type": "exit", "message": words.exit_words(code)}
        return cls(rank=t.rank, outcome=outcome, exit_code=code, pending=pending, error=err, output=output,
                   stack=t.stack, pid=t.pid, value_bytes=value)

    def pending_words(self) -> str:
        """The call it was inside, short: 'all_reduce #3 on [0, 1]', 'send peer 1'."""
        p = self.pending
        if not p:
            return "" if self.outcome == "ok" else "-"
        text = f"{p['op']}" + (f" #{p['seq']}" if p.get("seq") else "")
        if p.get("peer") is not None:
            text += f" peer {p['peer']}"
        elif p.get("group"):
            g = p["group"]
            text += f" on {g if len(g) <= 8 else f'[{g[0]}..{g[-1]}] ({len(g)} ranks)'}"
        return text

    def site(self) -> str:
        """Where it was: the pending call's site, else where its error was raised."""
        if self.pending:
            return self.pending.get("site") or ""
        if self.error and self.error.get("site"):
            return self.error["site"]
        return ""

    def to_dict(self) -> dict:
        return {"rank": self.rank, "outcome": self.outcome, "exit_code": self.exit_code, "pending": self.pending,
                "error": self.error, "pid": self.pid, "stack": self.stack, "output": self.output}


@dataclass
class RunResult:
    verdict: str
    world_size: int
    wall_s: float | None
    diagnosis: Diagnosis
    ranks: list[RankResult]
    events: list[dict] = field(default_factory=list, repr=False)
    run_dir: str | None = None
    pgid: int | None = None  # the run's process group (the zygote's pid): empty once the run returned
    ended_at: float | None = None  # time.time() when the run ended (or was ended by the sandbox)
    warnings: list = field(default_factory=list)  # sandbox.contracts.ContractWarning: contracts broken, any verdict

    @property
    def ok(self) -> bool:
        return self.verdict == "ok"

    @property
    def values(self) -> list:
        """Every rank's return value, in rank order."""
        return [r.value for r in self.ranks]

    @property
    def outputs(self) -> list[str]:
        return [r.output for r in self.ranks]

    def to_dict(self, events: bool = False) -> dict:
        d = {"verdict": self.verdict, "world_size": self.world_size,
             "wall_s": round(self.wall_s, 3) if self.wall_s is not None else None,
             "diagnosis": self.diagnosis.to_dict(), "ranks": [r.to_dict() for r in self.ranks],
             "warnings": [w.to_dict() for w in self.warnings]}
        if self.run_dir:
            d["trace_dir"] = self.run_dir
        if self.pgid:
            d["pgid"] = self.pgid
        if events:
            d["events"] = self.events
        return d

    def headline(self) -> str:
        """'HANG [p2p_cycle]: 2 ranks in 1.31 s'."""
        wall = f" in {self.wall_s:.2f} s" if self.wall_s is not None else ""
        kind = f" [{self.diagnosis.kind}]" if self.diagnosis.kind != "none" else ""
        return f"{self.verdict.upper()}{kind}: {self.world_size} ranks{wall}"

    def text(self, logs: bool = False) -> str:
        """The report as plain text: the headline, a table of ranks, the diagnosis (and every rank's output)."""
        lines = [self.headline(), ""]
        w = max([len(r.pending_words()) for r in self.ranks] + [len("pending call")])
        lines.append(f"{'rank':>4}  {'outcome':8}  {'pending call':{w}}  site")
        for r in self.ranks:
            lines.append(f"{r.rank:>4}  {r.outcome:8}  {r.pending_words():{w}}  {r.site()}")
        lines += ["", self.diagnosis.summary]
        for w in self.warnings:
            lines += ["", f"Warning [{w.kind}]: {w.summary}", f"  Rule: {w.rule}"]
        if logs:
            for r in self.ranks:
                lines += [f"[rank {r.rank}] {line}" for line in r.output.splitlines()]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p, cycle) -> None:  # IPython / Jupyter
        p.text(str(self))

    def _repr_html_(self) -> str:  # Jupyter, and the docs site's rendered notebooks
        return htmlview.run_result(self)
