"""A lab's rules: what a right answer must also do that the single-process reference cannot tell. A fix where
every rank reads block 0 and nothing is communicated returns the reference's values; on the real system a rank
can read only its own block, so the lab says so as a rule, and the check holds the fix to it.

A rule reads the run (`RunResult`): its events (the calls each rank made: `communicates`) and the facts the
ranks' own code recorded with `note(**fields)` (`notes(res)`). A bug module may state its lab's rules as
`LAB_RULES = [...]` (or a function returning the list, so the module need not import this one to be defined).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from sandbox import words
from sandbox.calls import COLLECTIVES, OPS
from sandbox.result import RunResult

# the calls that move data: every collective but the barriers, and every point-to-point op (init, new_group,
# destroy and waits move none)
MOVES = frozenset(n for n in COLLECTIVES if "barrier" not in n) | frozenset(n for n, o in OPS.items()
                                                                            if o.kind == "p2p")


@dataclass(frozen=True, kw_only=True)
class Rule:
    """`says` what must hold, in words; `found(res)` is None when it holds, else one sentence on what broke it."""
    says: str
    found: Callable[[RunResult], str | None]


def communicates(op: str | tuple | None = None, min_calls: int = 1, says: str | None = None) -> Rule:
    """A rule: every rank made at least `min_calls` torch.distributed calls that move data (of `op`, a name or a
    tuple of names, if given; barriers, init and waits do not count). Its sentence names the ranks that did not."""
    ops = MOVES if op is None else frozenset((op,) if isinstance(op, str) else op)
    unknown = sorted(ops - set(OPS))
    if unknown:
        raise ValueError(f"{', '.join(unknown)} is not a torch.distributed call the sandbox traces.")
    calls = words.plural(min_calls, "call" if op is None else f"{' or '.join(sorted(ops))} call")
    says = says or f"every rank makes at least {calls}" + (
        "" if op is not None else " that moves data" if min_calls == 1 else " that move data")

    def found(res: RunResult) -> str | None:
        made = calls_made(res, ops)
        short = {r: made.get(r, 0) for r in range(res.world_size) if made.get(r, 0) < min_calls}
        if not short:
            return None
        counts = sorted(set(short.values()))
        return "; ".join(f"{words.ranks([r for r in short if short[r] == c])} made {c or 'none'}" for c in counts)

    return Rule(says=says, found=found)


def calls_made(res: RunResult, ops=MOVES) -> dict[int, int]:
    """How many calls of `ops` each rank entered (a `batch_isend_irecv` is one call)."""
    made: dict[int, int] = {}
    for ev in res.events:
        if ev.get("ev") == "enter" and ev.get("op") in ops:
            made[ev.get("rank")] = made.get(ev.get("rank"), 0) + 1
    return made


def note(**fields) -> None:
    """Inside a rank: record a fact in this rank's trace (`notes(res)` reads it back in the parent). Values are
    kept as JSON: a tensor becomes its list of numbers, anything else JSON does not know its str(). Outside a
    sandbox rank there is no trace, and the note is dropped."""
    from sandbox import trace  # the rank's tracer (torch): imported only where a rank calls this

    trace.note({k: plain(v) for k, v in fields.items()})


def plain(v):
    if hasattr(v, "tolist") and callable(v.tolist):  # a tensor or a numpy value: its numbers, not its repr
        return v.tolist()
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): plain(x) for k, x in v.items()}
    return v


def notes(res: RunResult) -> dict[int, list[dict]]:
    """Every rank's notes, in the order it wrote them: {rank: [fields, ...]} (a rank that wrote none is absent)."""
    out: dict[int, list[dict]] = {}
    for ev in res.events:
        if ev.get("ev") == "note":
            out.setdefault(ev.get("rank"), []).append(ev.get("fields") or {})
    return out


def module_rules(module) -> list[Rule]:
    """A bug module's `LAB_RULES`: a list of rules, or a function returning one; none when it has none."""
    rules = getattr(module, "LAB_RULES", None)
    if rules is None:
        return []
    rules = rules() if callable(rules) else rules
    if not all(isinstance(r, Rule) for r in rules):
        raise TypeError(f"{module.__name__}.LAB_RULES must be a list of sandbox.lab.Rule.")
    return list(rules)
