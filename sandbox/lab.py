"""What the bug labs call: show a catalogue bug's code, run its broken or fixed variant, and check a learner's fix.

    from sandbox import lab
    b = lab.Lab("kv-sync")                 # a catalogue entry (python -m sandbox.repro --list)
    b.show("broken")                       # its broken code, highlighted; b.source("broken") is the text
    res = b.run("broken", timeline=True)   # as python -m sandbox.repro runs it; shows the result and the timeline
    c = b.check(my_fixed)                  # the learner's fix on the bug's ranks: right, hang, wrong or error
    b.run("fixed")                         # the reference fix

`run` and `check` show what they found (in Jupyter as HTML, elsewhere as text) and return it: assign the
returned value (`res = b.run(...)`) or end the line with `;`, or Jupyter shows it a second time.

A check is the catalogue's fixed variant with the learner's function in place of the module's
(`sandbox.bugs.run_variant(..., fix=fn)`): every rank calls it with the keyword arguments the module's own `fixed()`
gets, rank 0 also computes the module's single-process reference, and the fixed variant's documented expectation
(`sandbox.bugs.unmet_expectations`) decides; `grade_fix` says the answer in one sentence. A wrong fix is an answer,
never an exception.
"""
from __future__ import annotations

import importlib
import inspect
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass

from sandbox import bugs, words
from sandbox.bugs.reference import differences, reference_of
from sandbox.launcher import Interrupted
from sandbox.report import html
from sandbox.result import RunResult

VERDICTS = ("right", "hang", "wrong", "error", "crash", "interrupted")
_TITLES = {"right": "Right", "hang": "Hangs", "wrong": "Wrong answer", "error": "Error", "crash": "Crash",
           "interrupted": "Interrupted"}


@dataclass
class Check:
    """A learner's fix, judged. `verdict` is right, hang, wrong, error or crash (interrupted after Ctrl-C);
    `message` says why in one sentence; `result` is the run it is based on."""
    ok: bool
    verdict: str
    message: str
    result: RunResult | None = None

    def __str__(self) -> str:
        return f"{_TITLES[self.verdict]}: {self.message}"

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))

    def _repr_html_(self) -> str:
        return html.check(self.ok, _TITLES[self.verdict], self.message, self.result)


class Lab:
    """One bug of the catalogue, for a notebook."""

    def __init__(self, slug: str):
        known = bugs.registry()
        if slug not in known:
            raise ValueError(f"unknown bug {slug!r}; the catalogue has: {', '.join(known)}.")
        self.bug = known[slug]

    def __repr__(self) -> str:
        return f"Lab({self.bug.slug!r})"

    @property
    def module(self):
        """The bug's module (imported on first use: it imports torch)."""
        return importlib.import_module(self.bug.module)

    def source(self, name: str = "broken") -> str:
        """The source of the module's `broken` or `fixed` function (or of any other function or class it defines)."""
        obj = getattr(self.module, name, None)
        if obj is None or not (inspect.isfunction(obj) or inspect.isclass(obj)) \
                or obj.__module__ != self.bug.module:
            raise ValueError(f"{self.bug.slug} defines no function {name!r}; try 'broken' or 'fixed'.")
        return inspect.getsource(obj)

    def show(self, name: str = "broken") -> None:
        """Display the source of `name` (see `source`) as highlighted code."""
        try:
            from IPython.display import Code, display
        except ImportError:  # no IPython: plain text is all there is
            print(self.source(name))
            return
        display(Code(self.source(name), language="python"))

    def _ranks(self, n: int | None) -> int:
        n = self.bug.world_size if n is None else n
        if n < self.bug.min_world_size:
            raise ValueError(f"{self.bug.slug} needs at least {self.bug.min_world_size} ranks, not {n}.")
        return n

    def run(self, variant: str = "broken", timeline: bool = False, n: int | None = None, gpu: bool = False,
            debug: str | None = None, show: bool = True, **launch_options) -> RunResult:
        """Run the catalogue's `broken` or `fixed` variant as `python -m sandbox.repro` does, show the result (and
        the timeline picture with `timeline=True`), and return it. Ctrl-C ends the run and shows where it was."""
        try:
            res = bugs.run_variant(self.bug, variant, self._ranks(n), gpu=gpu, debug=debug, **launch_options).result
        except Interrupted as e:
            res = e.result
        if show:
            show_result(res, timeline=timeline)
        return res

    def check(self, fn, n: int | None = None, gpu: bool = False, timeline: bool = False, show: bool = True,
              **launch_options) -> Check:
        """Run the learner's `fn` on the bug's ranks, called as the module's `fixed()` is, and judge it by the
        fixed variant's expectation. Shows the answer (and, with `timeline=True`, the timeline) and returns it."""
        n = self._ranks(n)
        try:
            res = bugs.run_variant(self.bug, "fixed", n, gpu=gpu, fix=fn, **launch_options).result
        except bugs.FixNotSendable as e:
            c = Check(False, "error", str(e))
        except Interrupted as e:
            c = grade_fix(self.bug, e.result, gpu=gpu)
        else:
            c = grade_fix(self.bug, res, gpu=gpu)
        if show:
            show_result(c.result, timeline=timeline, shown=c)
        return c


def grade_fix(bug: bugs.Bug, res: RunResult, gpu: bool = False) -> Check:
    """A learner's run against the bug's fixed expectation, as a Check with one sentence."""
    if res.verdict == "interrupted":
        return Check(False, "interrupted", "The run was interrupted before it could finish.", res)
    expect = bug.expect("fixed", gpu)
    why = bugs.unmet_expectations(expect, res)
    summary = res.diagnosis.summary
    if not why:
        same = " and matches the single-process reference" if expect.matches_reference else ""
        said = f"Every rank finished{same} ({words.plural(res.world_size, 'rank')})."
        if res.warnings:  # right, but it broke a contract a luckier timing forgave
            said += f" It broke a contract, though: {res.warnings[0].summary}"
        return Check(True, "right", said, res)
    if res.verdict == "hang":
        return Check(False, "hang", f"It hangs. {summary}", res)
    if res.verdict == "timeout":
        return Check(False, "hang", f"It did not finish in time. {summary}", res)
    if res.verdict == "error":
        return Check(False, "error", f"It fails. {summary}", res)
    if res.verdict == "crash":
        return Check(False, "crash", f"It crashes. {summary}", res)
    return Check(False, "wrong", _wrong(res) or "; ".join(why).capitalize() + ".", res)


def _wrong(res: RunResult) -> str | None:
    """'Rank 1 returned a wrong value: [2] is [0.0], the single-process reference has [37.0] (ranks 1 and 3 differ).'"""
    ref = reference_of(res)
    bad = differences(res, ref) if ref is not None else []
    if not bad:
        return None
    more = f" ({words.ranks([d.rank for d in bad])} differ)" if len(bad) > 1 else ""
    return f"Rank {bad[0].rank} {bad[0].sentence()}{more}."


# ----------------------------------------------------------------------------------------------- showing
def timeline_png(res: RunResult) -> bytes:
    """The timeline picture of a run as PNG bytes. Raises ValueError when the run recorded no calls to draw.
    Drawing switches matplotlib to Agg; the backend in use before (a notebook's inline plots) is put back."""
    import matplotlib

    from sandbox import report

    before = matplotlib.get_backend()  # resolves the default (in a kernel: inline) if nothing chose one yet
    d = tempfile.mkdtemp(prefix="sandbox-timeline-")
    try:
        path = report.timeline(res, os.path.join(d, "timeline.png"))
        with open(path, "rb") as f:
            return f.read()
    finally:
        shutil.rmtree(d, ignore_errors=True)
        if before.lower() != "agg":
            matplotlib.use(before)


def show_result(res: RunResult | None, timeline: bool = False, shown=None) -> None:
    """Display `shown` (default: the result) in Jupyter as HTML, or print it as text elsewhere; with `timeline`,
    the run's timeline picture under it."""
    shown = res if shown is None else shown
    try:
        from IPython import get_ipython
        from IPython.display import Image, display
    except ImportError:  # no IPython at all: a script or a test
        get_ipython = None
    if get_ipython is None or get_ipython() is None:
        print(shown.text(logs=True) if isinstance(shown, RunResult) else shown)
        return
    display(shown)
    if timeline and res is not None:
        try:
            display(Image(data=timeline_png(res), format="png"))
        except Exception as e:  # noqa: BLE001  a picture that cannot be drawn is not the run's failure
            print(f"no timeline: {e}", file=sys.stderr)
