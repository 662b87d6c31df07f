"""RunResult: what one run of N ranks came to. Its `to_dict()` is the JSON contract that docs, labs and tools read:
fields may be added, none renamed."""
from __future__ import annotations

import pickle
from dataclasses import dataclass, field
from typing import Any

from sandbox.diagnose import Diagnosis, RankTrack, _call

VERDICTS = ("ok", "error", "hang", "crash", "timeout", "interrupted")
OUTCOMES = ("ok", "error", "hung", "crashed", "stopped")


@dataclass
class RankResult:
    rank: int
    outcome: str
    exit_code: int | None = None
    pending: dict | None = None
    error: dict | None = None
    output: str = ""
    stack: str | None = None
    pid: int | None = None
    _value: bytes | None = field(default=None, repr=False)

    @property
    def value(self) -> Any:
        """The function's return value on this rank (None for scripts and for ranks that did not finish)."""
        if self._value is None:
            return None
        import sys
        # classes of the launching script travel as __sandbox_main__.X (the ranks' name for that script)
        sys.modules.setdefault("__sandbox_main__", sys.modules["__main__"])
        return pickle.loads(self._value)

    @classmethod
    def from_track(cls, t: RankTrack, outcome: str, output: str = "", value: bytes | None = None) -> "RankResult":
        p = t.pending if outcome in ("hung", "stopped", "crashed", "error") else None
        pending = None
        if p is not None:
            pending = {"op": p["op"] if p["op"] != "wait" else p.get("of"), "group": p.get("group"), "seq": p.get("seq"),
                       "site": p.get("site"), "func": p.get("func"), "call": _call(p), "since": p.get("t")}
            if p.get("peer") is not None:
                pending["peer"] = p["peer"]
        err = t.end.get("error") if t.end is not None and t.end.get("outcome") == "error" else None
        if err is None and outcome == "crashed" and t.exit_code is not None:
            from sandbox.diagnose import _exit_words
            err = {"type": "exit", "message": _exit_words(t.exit_code)}
        return cls(rank=t.rank, outcome=outcome, exit_code=t.exit_code, pending=pending, error=err, output=output,
                   stack=t.stack, pid=t.pid, _value=value)

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
             "diagnosis": self.diagnosis.to_dict(), "ranks": [r.to_dict() for r in self.ranks]}
        if self.run_dir:
            d["trace_dir"] = self.run_dir
        if self.pgid:
            d["pgid"] = self.pgid
        if events:
            d["events"] = self.events
        return d

    def __str__(self) -> str:
        from sandbox import report
        return report.plain(self)

    def _repr_pretty_(self, p, cycle) -> None:  # IPython / Jupyter
        p.text(str(self))
