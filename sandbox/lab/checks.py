"""Judging a learner's code: the `Check` every lab function returns, and the one place a run is turned into an
answer (`judge`), so a catalogue fix (`Lab.check`, `grade_fix`) and a build-it-yourself function (`check`) are held
to the same things in the same order:

1. it must end as asked (every rank finishes, or for an exercise the hang, error or crash asked for);
2. every rank's value must equal the single-process reference (sandbox.bugs.reference's comparison);
3. it must break no contract (a run that finished can still carry a bug a luckier timing forgave: an `isend`
   never waited on is "right" only with `lenient=True`, and the message names the contract either way);
4. it must keep the lab's rules (`sandbox.lab.rules`): what the reference cannot tell, such as "the ranks must
   communicate".

A wrong answer is a Check, never an exception; bad arguments (an unknown `expect`) are one ValueError sentence.
"""
from __future__ import annotations

import inspect
import sys
from dataclasses import dataclass

from sandbox import words
from sandbox.bugs.reference import Difference, first_difference, wanted
from sandbox.launcher import Interrupted, UsageError, launch
from sandbox.report import html
from sandbox.report.model import broken_of
from sandbox.result import RunResult

VERDICTS = ("right", "hang", "wrong", "error", "crash", "contract", "rule", "interrupted", "todo")
TITLES = {"right": "Right", "hang": "Hangs", "wrong": "Wrong answer", "error": "Error", "crash": "Crash",
          "contract": "Breaks a contract", "rule": "Breaks a rule", "interrupted": "Interrupted", "todo": "To do"}
EXPECTS = ("right", "hang", "error", "crash", "wrong")


@dataclass
class Check:
    """A learner's code, judged. `verdict` is one of VERDICTS (what the run came to: right, hang, wrong, error,
    crash, contract, rule, interrupted; todo for a task not written yet, whose empty body raises
    NotImplementedError); `ok` says whether that is what was asked for; `message` says why in a sentence or two;
    `result` is the run it is based on (None when the code never reached the ranks)."""
    ok: bool
    verdict: str
    message: str
    result: RunResult | None = None

    @property
    def title(self) -> str:
        """The verdict in a word or two; a run that finished right when something else was asked is 'Finished'."""
        return "Finished" if self.verdict == "right" and not self.ok else TITLES[self.verdict]

    def __str__(self) -> str:
        return f"{self.title}: {self.message}"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:  # a task not written yet: its run is N tracebacks of the empty body, not shown
        return html.check(self.ok, self.title, self.message, self.result if self.verdict != "todo" else None)


# ----------------------------------------------------------------------------------------------- the judge
def ended(res: RunResult) -> str:
    """How a run ended, in a check's words: finished, hang (a timeout too: it did not finish), error, crash,
    interrupted."""
    v = str(res.verdict)
    return {"ok": "finished", "timeout": "hang"}.get(v, v)


def first_wrong(res: RunResult, reference, values=None, rtol: float | None = None,
                atol: float | None = None) -> list[Difference]:
    """Every rank whose value is not the reference (or its `per_rank` entry), in rank order. `values`: the ranks'
    values (default: what each returned). rtol/atol loosen the comparison: a number or tensor within them of the
    reference counts as equal (torch.testing's float32 tolerances apply in any case)."""
    values = res.values if values is None else values
    out = []
    for rank, got in enumerate(values):
        want = wanted(reference, rank)
        found = first_difference(loosened(got, want, rtol, atol) if rtol or atol else got, want)
        if found is not None:
            out.append(Difference(rank, *found))
    return out


def loosened(got, want, rtol, atol):
    """`got` with every number or tensor that is within rtol/atol of `want`'s replaced by `want`'s, so that
    first_difference, which decides, finds only what is further off."""
    if isinstance(got, (list, tuple)) and isinstance(want, (list, tuple)) and len(got) == len(want):
        items = [loosened(g, w, rtol, atol) for g, w in zip(got, want)]
        return items if isinstance(got, list) else tuple(items)
    if isinstance(got, dict) and isinstance(want, dict) and got.keys() == want.keys():
        return {k: loosened(got[k], want[k], rtol, atol) for k in got}
    if type(got) is float and type(want) is float:
        return want if abs(got - want) <= (atol or 0) + (rtol or 0) * abs(want) else got
    torch = sys.modules.get("torch")  # a tensor can only be here if unpickling it imported torch
    if torch is not None and isinstance(got, torch.Tensor) and isinstance(want, torch.Tensor):
        try:
            torch.testing.assert_close(got, want, rtol=rtol or 0, atol=atol or 0)
        except (AssertionError, TypeError, ValueError, RuntimeError):  # not close (or not comparable): kept
            return got
        return want
    return got


def wrong_words(bad: list[Difference]) -> str:
    """'Rank 1 returned a wrong value: [2] is [0.0], the single-process reference has [37.0] (ranks 1 and 3
    differ).'"""
    more = f" ({words.ranks([d.rank for d in bad])} differ)" if len(bad) > 1 else ""
    return f"Rank {bad[0].rank} {bad[0].sentence()}{more}."


def contract_words(warnings: list) -> str:
    """The first contract broken, in plain words: what happened (and how often at that call site, as the report
    shows it) and the rule."""
    b = broken_of(warnings)[0]
    others = len({w.kind for w in warnings}) - 1
    more = f" It broke {words.plural(others, 'other kind')} of contract too (see the run)." if others else ""
    return f"{b.text.rstrip('.')}. The contract ({b.kind}): {b.rule}{more}"


def judge(res: RunResult, *, matched: str, wrong: str | None, rules=(), lenient: bool = False) -> "Check":
    """A run that finished, with `wrong` (why its values are wrong) or None, against contracts and rules.
    `matched` is what a right run's message says it matched ('' when there was no reference)."""
    if wrong:
        return Check(False, "wrong", wrong, res)
    done = f"Every rank finished{matched}"
    if res.warnings and not lenient:
        return Check(False, "contract", f"{done}, but it broke a contract: {contract_words(res.warnings)} Pass"
                                        " lenient=True to accept it anyway.", res)
    for rule in rules:
        found = rule.found(res)
        if found:
            return Check(False, "rule", f"It finishes with the right values, but breaks a rule of this lab:"
                                        f" {rule.says}: {found.rstrip('.')}.", res)
    said = f"{done} ({words.plural(res.world_size, 'rank')})."
    if res.warnings:  # lenient: right, and the learner still hears which contract it broke
        said += f" It broke a contract, accepted as you asked (lenient=True): {contract_words(res.warnings)}"
    return Check(True, "right", said, res)


def failed(res: RunResult) -> Check:
    """A run that did not finish, as the answer of a check that wanted it to."""
    summary = res.diagnosis.summary
    how = ended(res)
    if how == "interrupted":
        return Check(False, "interrupted", "The run was interrupted before it could finish.", res)
    said = {"hang": "It hangs." if res.verdict == "hang" else "It did not finish in time.",
            "error": "It fails.", "crash": "It crashes."}[how]
    return Check(False, how, f"{said} {summary}", res)


# ----------------------------------------------------------------------------------------------- generic check
def check(fn, n: int | tuple = 4, args: tuple = (), kwargs: dict | None = None, reference=None, expect: str = "right",
          kind: str | None = None, culprits=None, rules=(), lenient: bool = False, timeline: bool = False,
          show: bool = True, rtol: float | None = 1e-5, atol: float | None = 1e-6, **launch_options) -> Check:
    """Run `fn(*args, **kwargs)` on `n` ranks (sandbox.launch) and judge it; `n` a tuple of world sizes: on each
    in turn, and the answer is the first size's that fails, else the first size's run, right on every size.
    `reference(n, *args, **kwargs)`, called once per size here, single-process, gives the value every rank must
    return (or {"per_rank": [v0, v1, ...]}).
    expect="right": every rank finishes with the reference's value, breaking no contract (unless `lenient`) and
    no rule of `rules`; "hang", "error", "crash": the run must end so (and with the diagnosis `kind` and the
    `culprits`, when given); "wrong": it must finish with a value that is not the reference's.
    The group: fn may call init_process_group itself; if neither it nor what it calls does, the sandbox makes
    the group before calling it (pass init=True or init=False to decide yourself)."""
    from sandbox.lab.display import show_result

    if expect not in EXPECTS:
        raise ValueError(f"expect is one of {', '.join(EXPECTS)}, not {expect!r}.")
    if expect == "wrong" and reference is None:
        raise ValueError("expect='wrong' needs a reference to be wrong against.")
    if culprits is not None and expect == "right":
        raise ValueError("culprits are for an expected failure (expect='hang', 'error' or 'crash').")
    if isinstance(n, (tuple, list)):
        return _on_sizes(fn, tuple(n), dict(args=args, kwargs=kwargs, reference=reference, expect=expect, kind=kind,
                                             culprits=culprits, rules=rules, lenient=lenient, rtol=rtol, atol=atol,
                                             **launch_options), timeline=timeline, show=show)
    launch_options.setdefault("init", not inits_itself(fn))
    try:
        res = launch(fn, world_size=n, args=tuple(args), kwargs=kwargs, **launch_options)
    except UsageError as e:  # the function (or its arguments) cannot reach the ranks: an answer, not a crash
        c = Check(False, "error", str(e))
    except Interrupted as e:
        c = failed(e.result)
    else:
        ref = reference(n, *args, **(kwargs or {})) if reference is not None else None
        c = judged(res, ref, expect=expect, kind=kind, culprits=culprits, rules=rules, lenient=lenient,
                   rtol=rtol, atol=atol)
    if show:
        show_result(c.result, timeline=timeline, shown=c)
    return c


def _on_sizes(fn, sizes: tuple, options: dict, *, timeline: bool, show: bool) -> Check:
    """`check` on each world size of `sizes` in turn (the labs promise any number of ranks)."""
    if not sizes or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in sizes):
        raise ValueError(f"n is a number of ranks or a tuple of them, not {sizes!r}.")
    return in_turn(sizes, lambda k: check(fn, k, show=False, **options), lambda k: f"On {words.plural(k, 'rank')}",
                   lambda rest: f"on {words.listed([str(k) for k in rest])} ranks", timeline=timeline, show=show)


def in_turn(cases: tuple, one, said, also, *, timeline: bool, show: bool) -> Check:
    """`one(case)` (a Check) for each case in turn: the first answer that is not what was asked, its message
    headed `said(case)`; else the first case's, which ends saying it held `also(the other cases)` too."""
    first = None
    for case in cases:
        c = one(case)
        if not c.ok:
            c = Check(False, c.verdict, c.message if c.verdict == "todo" else f"{said(case)}: {c.message}", c.result)
            break
        first = first or c
    else:
        c = Check(True, first.verdict, f"{first.message.rstrip('.')}; and the same {also(cases[1:])}."
                  if len(cases) > 1 else first.message, first.result)
    if show:
        from sandbox.lab.display import show_result

        show_result(c.result, timeline=timeline, shown=c)
    return c


def judged(res: RunResult, ref, *, expect: str, kind, culprits, rules, lenient, rtol, atol) -> Check:
    how = ended(res)
    if how == "interrupted":
        return failed(res)
    if how == "error" and unwritten(res):
        site = next((r.error.get("site") for r in res.ranks if r.error and r.error.get("site")), None)
        if site and site.startswith("<") and ">:" in site:  # a cell's function sent by value: no file name to give
            site = f"line {site.rsplit(':', 1)[1]} of its cell"
        return Check(False, "todo", "Not written yet: every rank stopped at the empty body's `raise"
                                    f" NotImplementedError`{f' ({site})' if site else ''}. Write the body in its"
                                    " place, then run the cell again.", res)
    bad = first_wrong(res, ref, rtol=rtol, atol=atol) if how == "finished" and ref is not None else []
    if expect == "right":
        if how != "finished":
            return failed(res)
        matched = " and matches the single-process reference" if ref is not None else ""
        return judge(res, matched=matched, wrong=wrong_words(bad) if bad else None, rules=rules, lenient=lenient)
    # an exercise that asks for a failure (or a wrong answer): what happened, and whether it is what was asked
    got = ("wrong" if bad else "right") if how == "finished" else how
    said = {"right": "Every rank finished with the right values.", "wrong": wrong_words(bad) if bad else ""}.get(got) \
        or res.diagnosis.summary
    asked = {"hang": "a hang", "error": "an error", "crash": "a crash", "wrong": "a wrong answer"}[expect]
    if got != expect:
        happened = {"right": "it finished", "wrong": "it finished with a wrong answer", "hang": "it hangs",
                    "error": "it fails", "crash": "it crashes"}[got]
        told = f"You asked for {asked}, but {happened}: {said}"
        if {expect, got} == {"error", "crash"}:  # the two failures a learner most often confuses: say both
            from sandbox.lab.predictions import VERDICTS

            told += f" (Crash means {VERDICTS['crash']}; error means {VERDICTS['error']}.)"
        return Check(False, got, told, res)
    misses = []
    if kind is not None and res.diagnosis.kind != kind:
        misses.append(f"the sandbox names it {res.diagnosis.kind}, not {kind}")
    if culprits is not None and set(res.diagnosis.culprit_ranks) != set(culprits):
        misses.append(f"its culprits are {sorted(res.diagnosis.culprit_ranks)}, not {sorted(culprits)}")
    if misses:
        return Check(False, got, f"It shows {asked}, but {words.listed(misses)}. {said}", res)
    named = f" ({res.diagnosis.kind})" if kind is not None else ""
    return Check(True, got, f"It shows {asked}{named}, as asked. {said}", res)


def unwritten(res: RunResult) -> bool:
    """Did every rank that failed stop at a bare `raise NotImplementedError` (a task's empty body: no message, where
    torch's own NotImplementedErrors always say what is missing), and none fail otherwise?"""
    errors = [r.error for r in res.ranks if r.error]
    return bool(errors) and all(e.get("type") == "NotImplementedError" and not e.get("message") for e in errors) \
        and all(r.error or r.outcome != "error" for r in res.ranks)


def inits_itself(fn, depth: int = 3) -> bool:
    """Does `fn`, or a function of its own module it calls (by name, `depth` calls deep), call
    init_process_group? Read from the code objects' names, so nothing is run."""
    seen: set[int] = set()

    def visit(code, glb, d) -> bool:
        if id(code) in seen:
            return False
        seen.add(id(code))
        if "init_process_group" in code.co_names:
            return True
        nested = [c for c in code.co_consts if inspect.iscode(c)]
        if any(visit(c, glb, d) for c in nested):
            return True
        if d <= 0:
            return False
        found = [glb.get(name) for name in code.co_names]
        # `helpers.setup()`: a function reached through a module the code names
        found += [getattr(m, name, None) for m in found if inspect.ismodule(m) for name in code.co_names]
        for f in found:
            f = getattr(f, "__wrapped__", f)
            if inspect.isfunction(f) and not (f.__module__ or "").startswith("torch"):
                if visit(f.__code__, f.__globals__, d - 1):
                    return True
        return False

    f = getattr(fn, "func", fn)  # functools.partial: the function it calls
    f = getattr(f, "__wrapped__", f)
    if not inspect.isfunction(f):
        return False
    return visit(f.__code__, f.__globals__, depth)
