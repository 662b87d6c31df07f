"""What one run of N ranks came to, as plain frozen data. `RunResult.to_dict()` is the JSON contract that docs, labs
and tools read (the README lists its fields): fields may be added, none renamed.

Nothing here draws a result: `sandbox.report` does (one model, drawn as plain text, in the terminal and as HTML). A
result only reaches for it, inside a method, when Python or Jupyter asks it to show itself."""
from __future__ import annotations

import io
import pickle
import re
import sys
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any

from sandbox import _paths, words
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


class Kind(_Words):
    """Why a run ended as it did: the kinds of diagnosis the rules name (`sandbox.diagnose`), each said in one plain
    sentence in `KIND_GLOSSARY` (what a learner reads before predicting one: `sandbox.lab.kinds()`)."""
    NONE = "none"
    P2P_CYCLE = "p2p_cycle"
    P2P_UNMATCHED = "p2p_unmatched"
    WAIT_CYCLE = "wait_cycle"
    MISSING_RANKS = "missing_ranks"
    LEFT_EARLY = "left_early"
    COLLECTIVE_MISMATCH = "collective_mismatch"
    GROUP_MISMATCH = "group_mismatch"
    INIT_MISMATCH = "init_mismatch"
    DUPLICATE_RANK = "duplicate_rank"
    LOOPBACK_ADDRESS = "loopback_address"
    NODE_FAILURE = "node_failure"
    STRAGGLER = "straggler"
    RANK_ERROR = "rank_error"
    RANK_CRASHED = "rank_crashed"
    UNEVEN_STEPS = "uneven_steps"
    UNUSED_PARAMETERS = "unused_parameters"
    MODEL_DIFFERS = "model_differs"


VERDICT_GLOSSARY = {
    Verdict.OK: "every rank finished (and, where the run has a reference, with the right values)",
    Verdict.HANG: "every live rank is blocked in calls nobody can complete; the sandbox ends the run and names why",
    Verdict.ERROR: "a rank raised an exception (or exited non-zero)",
    Verdict.CRASH: "a rank was killed by a signal (gloo aborts the process on some mismatches)",
    Verdict.TIMEOUT: "the run's own time limit passed before it finished, without a provable deadlock",
    Verdict.INTERRUPTED: "Ctrl-C or SIGTERM ended the run before it finished",
}
KIND_GLOSSARY = {
    Kind.NONE: "nothing to name: the run finished, or failed in a way no rule recognises",
    Kind.P2P_CYCLE: "point-to-point calls wait on each other in a cycle: each rank sends (or receives) first",
    Kind.WAIT_CYCLE: "ranks wait on each other in a cycle across different calls (collectives of different process "
                     "groups, or a collective and a send or recv): they issued those calls in different orders",
    Kind.P2P_UNMATCHED: "a send or recv that nothing will match: its peer is elsewhere, finished, or uses another tag",
    Kind.MISSING_RANKS: "some ranks wait in a call that the others never reach: they are elsewhere, or finished",
    Kind.LEFT_EARLY: "ranks finished and closed their connections while a slower rank was still making its own in "
                     "init_process_group or new_group (each rank's call returns once its own connections are made)",
    Kind.COLLECTIVE_MISMATCH: "the ranks are in different collectives at the same point (another op, shape, dtype "
                              "or root)",
    Kind.GROUP_MISMATCH: "the ranks created their process groups in a different order or with different members",
    Kind.INIT_MISMATCH: "the ranks tried to meet at different addresses or with different world sizes in "
                        "init_process_group (on several nodes, `localhost` is a different address on each)",
    Kind.DUPLICATE_RANK: "two processes claimed the same rank in init_process_group (LOCAL_RANK where RANK was "
                         "meant), so the ranks nobody claimed never join",
    Kind.LOOPBACK_ADDRESS: "on several nodes, gloo listened on a loopback address (the hostname resolves to "
                           "127.0.1.1), so ranks of the other nodes were refused",
    Kind.NODE_FAILURE: "a whole node died (every process on it at once), and the job could not go on without its "
                       "ranks: the ranks that then failed only lost their connection to it",
    Kind.STRAGGLER: "not a deadlock: some ranks were still busy in their own code while the others waited, until a "
                    "timeout passed",
    Kind.RANK_ERROR: "a rank raised an exception, while the others waited for it",
    Kind.RANK_CRASHED: "a rank's process died (a signal or an exit) and the others were left waiting",
    Kind.UNEVEN_STEPS: "the ranks ran a different number of training steps (uneven inputs), so one waits for a "
                       "gradient all_reduce nobody else makes",
    Kind.UNUSED_PARAMETERS: "DistributedDataParallel waited for gradients of parameters some ranks did not use",
    Kind.MODEL_DIFFERS: "the ranks built different models (parameters of other shapes or another order) for "
                        "DistributedDataParallel",
}


@dataclass(frozen=True, kw_only=True)
class Diagnosis:
    """Why the run ended as it did: a kind (a `Kind`; a string given is checked and turned into one), one sentence,
    and the structured facts behind it.

    The sentence a person reads (`summary`) is composed from parts kept apart here: `lead` (how the run was ended,
    when that is not the cause: a timeout, an interrupt), `cause` (what the rules found) and `notes` (what else
    explains it: a contract the failing call broke). Build a changed copy with `led_by` / `noted`."""
    kind: Kind
    cause: str
    culprit_ranks: list[int] = field(default_factory=list)
    op: str | None = None
    group: list[int] | None = None
    seq: int | None = None
    site: str | None = None
    details: dict = field(default_factory=dict)
    lead: str = ""
    notes: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "kind", Kind(self.kind))  # a string given is checked: a kind no glossary has fails

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


_FRAME = re.compile(r'\s+File "(.+)", line \d+ in \S+')


def user_stack(stack: str | None) -> str | None:
    """A faulthandler dump with the frames a user did not write left out: the sandbox's plumbing (the tracer's
    wrapper, the rank runner, the zygote, runpy) and torch's own, the rule call sites and stack tops follow. A thread
    with none of the user's frames (a sandbox thread) goes whole; the standard library's frames stay in the threads
    that keep theirs (a user's `queue.get` says where it waits). A dump with no user frame at all (the sandbox
    itself hung) is kept as it is: it is all there is to go on."""
    if not stack:
        return stack
    threads: list[list[str]] = []
    for line in stack.splitlines():
        if not threads or (line and not line[0].isspace()):  # "Current thread 0x... (most recent call first):"
            threads.append([])
        threads[-1].append(line)
    kept, any_user = [], False
    for lines in threads:
        frames = [(line, m.group(1)) for line in lines if (m := _FRAME.match(line))]
        mine = [path for _, path in frames if not (_paths.is_plumbing(path) or _paths.is_stdlib(path))]
        if frames and not mine:
            continue
        any_user = any_user or bool(mine)
        drop = {line for line, path in frames if _paths.is_plumbing(path)}
        kept += [line for line in lines if line not in drop]
    if not any_user:
        return stack
    return "\n".join(kept) + ("\n" if stack.endswith("\n") else "")


@dataclass(frozen=True, kw_only=True)
class RankResult:
    """How one rank ended. `outcome` is an `Outcome` (a string given here is checked and turned into one)."""
    rank: int
    outcome: Outcome
    exit_code: int | None = None
    pending: dict | None = None   # the call it was inside: op, group, seq, site, func, call (in words), since, peer
    error: dict | None = None     # type, message, traceback, site (or type "exit" with the exit status in words)
    output: str = ""
    stack: str | None = None      # its Python stack (faulthandler, the user's frames) when the sandbox ended it
    pid: int | None = None
    value_bytes: bytes | None = field(default=None, repr=False)
    host: str | None = None       # the hostname it ran on (its node's, on simulated nodes); None if it never said

    def __post_init__(self) -> None:
        object.__setattr__(self, "outcome", Outcome(self.outcome))  # frozen: the one way to normalise a field

    @property
    def value(self) -> Any:
        """The function's return value on this rank (None for scripts and for ranks that did not finish)."""
        if self.value_bytes is None:
            return None
        return _Unpickler(io.BytesIO(self.value_bytes)).load()

    @classmethod
    def from_track(cls, t: RankTrack, outcome: str, output: str = "", value: bytes | None = None) -> "RankResult":
        p = t.pending if outcome in (Outcome.HUNG, Outcome.STOPPED, Outcome.CRASHED, Outcome.ERROR) else None
        err = t.error
        if p is None and outcome == Outcome.HUNG and t.failed_call is not None:
            # its stuck call raised only as the sandbox ended a peer (ranks are ended one after another): it was
            # hung in that call, and the error is the teardown's, not the run's
            p, err = t.failed_call, None
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
        if err is None and outcome == Outcome.CRASHED and code is not None:
            err = {"type": "exit", "message": words.exit_words(code)}
        return cls(rank=t.rank, outcome=outcome, exit_code=code, pending=pending, error=err, output=output,
                   stack=user_stack(t.stack), pid=t.pid, value_bytes=value, host=(t.hello or {}).get("host"))

    def to_dict(self) -> dict:
        return {"rank": self.rank, "outcome": str(self.outcome), "exit_code": self.exit_code, "pending": self.pending,
                "error": self.error, "pid": self.pid, "stack": self.stack, "output": self.output, "host": self.host}


@dataclass(frozen=True, kw_only=True)
class RunResult:
    """What the run came to. `verdict` is a `Verdict` (a string given here is checked and turned into one)."""
    verdict: Verdict
    world_size: int
    wall_s: float | None
    diagnosis: Diagnosis
    ranks: list[RankResult]
    events: list[dict] = field(default_factory=list, repr=False)
    run_dir: str | None = None
    pgid: int | None = None  # the run's process group (the zygote's pid): empty once the run returned
    ended_at: float | None = None  # time.time() when the run ended (or was ended by the sandbox)
    warnings: list = field(default_factory=list)  # sandbox.contracts.ContractWarning: contracts broken, any verdict

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", Verdict(self.verdict))  # frozen: the one way to normalise a field

    @property
    def ok(self) -> bool:
        return self.verdict == Verdict.OK

    @property
    def values(self) -> list:
        """Every rank's return value, in rank order."""
        return [r.value for r in self.ranks]

    @property
    def outputs(self) -> list[str]:
        return [r.output for r in self.ranks]

    def to_dict(self, events: bool = False) -> dict:
        d = {"verdict": str(self.verdict), "world_size": self.world_size,
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
        kind = f" [{self.diagnosis.kind}]" if self.diagnosis.kind != Kind.NONE else ""
        return f"{str(self.verdict).upper()}{kind}: {self.world_size} ranks{wall}"

    # Drawing is `sandbox.report`'s job; these are the hooks Python, IPython and Jupyter call to show a result, so
    # each imports the renderer when asked (never when a result is built: the data does not depend on its drawing).
    def text(self, logs: bool = False) -> str:
        """The report as plain text (`sandbox.report.text`): the headline, the diagnosis, the table of ranks."""
        from sandbox.report import text
        return text.render(self, logs=logs)

    def __str__(self) -> str:
        return self.text()

    def _repr_pretty_(self, p, cycle) -> None:  # IPython
        p.text(str(self))

    def _repr_html_(self) -> str:  # Jupyter, and the docs site's rendered notebooks
        from sandbox.report import html
        return html.run_result(self)
