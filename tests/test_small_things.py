"""Small things a new user meets (issue 28, part 6), each held without starting ranks:

- under strict (`--strict`, `strict=True`), a run that finished but broke a contract fails, and its headline says
  FAILED, never OK, in every renderer;
- `python -m sandbox.diagnose DIR` on Flight Recorder dumps where one rank's dump is empty (it died writing it)
  diagnoses from the dumps there are and says whose dump cannot be read; a directory where none can be read is one
  sentence and exit code 2;
- the site's search lists an error message's own page first for the short form a person types too, not only for the
  message pasted whole (the browser test types them: tests/test_browser.py).
"""
import io
import json
import os
import pickle
import sys

import pytest

from sandbox import flight
from sandbox.contracts import ContractWarning
from sandbox.diagnose.__main__ import load_result, main as diagnose_main
from sandbox.report import html, model, terminal, text
from sandbox.result import Diagnosis, RankResult, RunResult

# ------------------------------------------------------------------------------------------ strict: never OK


def _finished(warnings: int) -> RunResult:
    """A run where both ranks finished, with `warnings` contract warnings."""
    w = ContractWarning("not_destroyed", "Ranks 0 and 1 exited without destroying the default process group "
                        "(initialised at job.py:2).", [0, 1], op="destroy_process_group",
                        sites={0: "job.py:2", 1: "job.py:2"})
    return RunResult(verdict="ok", world_size=2, wall_s=3.04, diagnosis=Diagnosis(kind="none", cause="All 2 ranks"
                     " finished."), ranks=[RankResult(rank=r, outcome="ok", exit_code=0) for r in (0, 1)],
                     warnings=[w] * warnings)


def test_under_strict_a_run_that_broke_a_contract_is_never_headed_ok():
    res = _finished(1)
    assert text.render(res).splitlines()[0] == "OK: 2 ranks in 3.04 s"  # without strict the warning fails nothing
    said = text.render(res, strict=True).splitlines()
    assert said[:2] == ["FAILED (strict: 1 contract warning): 2 ranks in 3.04 s", "All 2 ranks finished."], said
    out = io.StringIO()
    terminal.print_result(res, file=out, strict=True)
    assert out.getvalue().startswith("FAILED (strict: 1 contract warning): 2 ranks in 3.04 s\n"), out.getvalue()
    rep = model.build(res, strict=True)
    assert (rep.ok, rep.colour) == (False, model.RED)  # red, as a failure is, where OK is green
    assert "FAILED (strict: 1 contract warning)" in html.draw(rep) and model.RED in html.draw(rep)


def test_strict_changes_nothing_where_there_is_no_warning_or_the_run_failed_anyway():
    assert model.headline(_finished(0), strict=True) == "OK: 2 ranks in 3.04 s"
    assert model.headline(_finished(2), strict=True) == "FAILED (strict: 2 contract warnings): 2 ranks in 3.04 s"
    hung = RunResult(verdict="hang", world_size=2, wall_s=1.5, diagnosis=Diagnosis(kind="p2p_cycle", cause="c."),
                     ranks=[RankResult(rank=r, outcome="hung") for r in (0, 1)], warnings=_finished(1).warnings)
    assert model.headline(hung, strict=True) == "HANG [p2p_cycle]: 2 ranks in 1.50 s"
