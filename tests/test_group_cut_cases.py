"""Programs written blind, from the shapes of real new_group bug reports, by a helper that had not read the sandbox
(tests/data/group_cut; GROUND_TRUTH.md there says what each did under plain torchrun): groups made in another order
or with other members on some rank, while some rank also finishes early, beside correct programs where a rank leaves
early once every group is made, and a failure inside a subgroup that is not a group problem. The group rule excuses
a rank cut off while connecting in a new_group (it is compared only on the groups it made before); these hold that
the excuse does not hide a real mismatch, and that a rank that left early is not blamed for one it did not make.

Each program runs once, three at a time; a failing one must be named with its header's kind and culprits (the ranks
whose code must change), a correct one must finish without a warning. A run that ended in the start-up race a
program leaves open (`raced`: a rank cut off while connecting, which plain torchrun also shows on a loaded machine)
is the one other answer a failing program may get."""
import glob
import os

import pytest

from conftest import case_header, raced, run_cases

pytestmark = pytest.mark.slow  # real runs of the set's programs

CASES = os.path.join(os.path.dirname(__file__), "data", "group_cut")
HEADERS = {os.path.basename(p)[:-3]: case_header(p) for p in sorted(glob.glob(os.path.join(CASES, "*.py")))}
FAILING = [name for name, h in HEADERS.items() if h["kind"] != "none"]


@pytest.fixture(scope="module")
def runs():
    return run_cases(CASES, list(HEADERS))


def test_the_set_is_there():
    assert len(HEADERS) >= 8 and len(HEADERS) - len(FAILING) >= 2, HEADERS


@pytest.mark.parametrize("name", FAILING)
def test_a_failing_program_is_named_with_its_kind_and_the_ranks_that_diverged(runs, name):
    res, h = runs[name], HEADERS[name]
    got = (res.diagnosis.kind, res.diagnosis.culprit_ranks)
    assert not res.ok, res.diagnosis.summary
    assert got == (h["kind"], h["culprits"]) or raced(res), (got, h, res.diagnosis.summary)


@pytest.mark.parametrize("name", [name for name in HEADERS if name not in FAILING])
def test_a_correct_program_passes_with_no_warning(runs, name):
    res = runs[name]
    assert res.ok and res.warnings == [], (res.diagnosis.summary, [w.summary for w in res.warnings])
