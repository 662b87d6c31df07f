"""One bug of the catalogue, for a notebook (`Lab`): its code shown without the answers, a graded prediction, its
broken and fixed variants run, and a learner's fix checked.

A check is the catalogue's fixed variant with the learner's function in place of the module's
(`sandbox.bugs.run_variant(..., fix=fn)`): every rank calls it with the keyword arguments the module's own
`fixed()` gets, rank 0 also computes the module's single-process reference, and the fixed variant's documented
expectation (`sandbox.bugs.unmet_expectations`) decides, then the contracts and the lab's rules
(`sandbox.lab.checks.judge`). A wrong fix is an answer, never an exception.
"""
from __future__ import annotations

import importlib
import inspect
import io
import os
import re
import tokenize
from html import escape

from sandbox import bugs
from sandbox.bugs.reference import differences, reference_of
from sandbox.lab import predictions
from sandbox.lab.checks import Check, failed, judge, wrong_words
from sandbox.lab.display import in_jupyter, show_html, show_result
from sandbox.lab.rules import module_rules
from sandbox.launcher import Interrupted
from sandbox.result import RunResult

HINT = re.compile(r"#\s*(BUG|FIX)\b")  # a comment that tells the answer: `# BUG: ...`, `# FIX (sender): ...`


def strip_hints(source: str) -> str:
    """`source` without its BUG/FIX comments: a whole-line `# BUG...` / `# FIX...` comment is dropped (with the
    comment lines that continue it, at its column), a trailing one is cut from its line. Comments are found as
    Python's tokenizer finds them, so a `#` inside a string is left alone."""
    lines = source.splitlines(keepends=True)
    hints = []  # (row, col, whole line)
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                whole = not lines[row - 1][:col].strip()
                hints.append((row, col, whole, bool(HINT.match(tok.string))))
    except (tokenize.TokenError, IndentationError):  # not whole Python (a fragment): shown as it is
        return source
    drop, cut, follow = set(), {}, None  # follow: the column of the hint a next comment line would continue
    for row, col, whole, hint in hints:
        if hint:
            (drop.add(row) if whole else cut.__setitem__(row, col))
            follow = (row, col)
        elif whole and follow is not None and follow == (row - 1, col):
            drop.add(row)  # the hint goes on over the next line, at its column
            follow = (row, col)
        else:
            follow = None
    out = []
    for i, line in enumerate(lines, start=1):
        if i in drop:
            continue
        if i in cut:
            end = "\n" if line.endswith("\n") else ""
            line = line[:cut[i]].rstrip() + end
        out.append(line)
    return "".join(out)


class Lab:
    """One bug of the catalogue, for a notebook."""

    def __init__(self, slug: str):
        known = bugs.registry()
        if slug not in known:
            raise ValueError(f"unknown bug {slug!r}; the catalogue has: {', '.join(known)}.")
        self.bug = known[slug]
        self.prediction: predictions.Prediction | None = None
        self.last_grade: predictions.Grade | None = None

    def __repr__(self) -> str:
        return f"Lab({self.bug.slug!r})"

    @property
    def module(self):
        """The bug's module (imported on first use: it imports torch)."""
        return importlib.import_module(self.bug.module)

    def source(self, name: str = "broken", hints: bool = True) -> str:
        """The source of the module's `broken` or `fixed` function (or of any other function or class it
        defines); without its BUG/FIX comments with `hints=False`."""
        obj = getattr(self.module, name, None)
        if obj is None or not (inspect.isfunction(obj) or inspect.isclass(obj)) \
                or obj.__module__ != self.bug.module:
            raise ValueError(f"{self.bug.slug} defines no function {name!r}; try 'broken' or 'fixed'.")
        text = inspect.getsource(obj)
        return text if hints else strip_hints(text)

    def show(self, name: str = "broken", hints: bool = False) -> None:
        """Display the source of `name` as highlighted code: without the BUG/FIX comments that give the answer
        away, unless `hints=True`."""
        text = self.source(name, hints=hints)
        if not in_jupyter():  # a script or a test: plain text is all there is
            print(text, end="")
            return
        from IPython.display import Code, display
        display(Code(text, language="python"))

    def _ranks(self, n: int | None) -> int:
        n = self.bug.world_size if n is None else n
        if n < self.bug.min_world_size:
            raise ValueError(f"{self.bug.slug} needs at least {self.bug.min_world_size} ranks, not {n}.")
        return n

    def predict(self, verdict: str | None = None, kind: str | None = None, culprits=None,
                show: bool = True) -> predictions.Prediction:
        """Record a prediction for the next `run("broken")`: its verdict (ok, wrong, hang, error, crash, timeout),
        its diagnosis kind (`lab.kinds()` lists them) and its culprit ranks. Any field may be left out. Reveals
        nothing; a value the sandbox never reports is one ValueError sentence, and nothing is recorded."""
        p = predictions.prediction(verdict, kind, culprits)
        self.prediction = p
        if show:
            said = f"Prediction recorded: {p}. Run the broken variant to see how it went."
            show_html(f'<div class="sandbox-prediction">{escape(said)}</div>', said)
        return p

    def run(self, variant: str = "broken", timeline: bool = False, n: int | None = None, gpu: bool = False,
            debug: str | None = None, show: bool = True, **launch_options) -> RunResult:
        """Run the catalogue's `broken` or `fixed` variant as `python -m sandbox.repro` does, show the result (and
        the timeline picture with `timeline=True`), and return it. A prediction recorded with `predict` is
        graded against a broken run (`last_grade`) and shown under it. Ctrl-C ends the run and shows where it
        was. Under SANDBOX_SHARED_RUNS (a test session executing the labs) a run on the documented ranks is the
        session's one run of that variant (`sandbox.bugs.shared_run`)."""
        n = self._ranks(n)
        cache = os.environ.get(bugs.SHARED_RUNS_ENV)
        try:
            if cache and n == self.bug.world_size and not gpu and debug is None and not launch_options:
                res = bugs.shared_run(cache, self.bug, variant).result  # a test session's: made once for all
            else:
                res = bugs.run_variant(self.bug, variant, n, gpu=gpu, debug=debug, **launch_options).result
        except Interrupted as e:
            res = e.result
        grade = None
        if variant == "broken" and self.prediction is not None and res.verdict != "interrupted":
            grade = self.last_grade = predictions.grade(self.prediction, res)
            self.prediction = None  # one prediction, one run
        if show:
            show_result(res, timeline=timeline)
            if grade is not None:
                show_html(grade._repr_html_(), str(grade))
        return res

    def rules(self) -> list:
        """The rules of this bug's lab (the module's LAB_RULES), which every check holds a fix to."""
        return module_rules(self.module)

    def check(self, fn, n: int | None = None, gpu: bool = False, timeline: bool = False, show: bool = True,
              rules=(), lenient: bool = False, **launch_options) -> Check:
        """Run the learner's `fn` on the bug's ranks, called as the module's `fixed()` is, and judge it by the
        fixed variant's expectation, the contracts (unless `lenient`), the lab's rules (the module's LAB_RULES)
        and `rules`. Shows the answer (and, with `timeline=True`, the timeline) and returns it."""
        n = self._ranks(n)
        every = self.rules() + list(rules)
        try:
            res = bugs.run_variant(self.bug, "fixed", n, gpu=gpu, fix=fn, **launch_options).result
        except bugs.FixNotSendable as e:
            c = Check(False, "error", str(e))
        except Interrupted as e:
            c = grade_fix(self.bug, e.result, gpu=gpu)
        else:
            c = grade_fix(self.bug, res, gpu=gpu, rules=every, lenient=lenient)
        if show:
            show_result(c.result, timeline=timeline, shown=c)
        return c


def grade_fix(bug: bugs.Bug, res: RunResult, gpu: bool = False, *, rules=(), lenient: bool = False) -> Check:
    """A learner's run against the bug's fixed expectation, then the contracts and the rules, as a Check."""
    if res.verdict != "ok":
        return failed(res)
    expect = bug.expect("fixed", gpu)
    why = bugs.unmet_expectations(expect, res)
    if why:
        ref = reference_of(res)
        bad = differences(res, ref) if ref is not None else []
        return Check(False, "wrong", wrong_words(bad) if bad else "; ".join(why).capitalize() + ".", res)
    matched = " and matches the single-process reference" if expect.matches_reference else ""
    return judge(res, matched=matched, wrong=None, rules=rules, lenient=lenient)
