"""`bugs.unmet_expectations()` on hand-built results: every field of an Expect can reject a run, and a right run
passes; and the comparison with the single-process reference (`sandbox.bugs.reference`: torch.testing's semantics).

No ranks are started: the results are plain objects with the attributes the check reads, so these tests hold
whatever shape the engine's own result types take.
"""
from __future__ import annotations

import dataclasses

from dataclasses import dataclass, field

import pytest

from sandbox.bugs import Expect, unmet_expectations
from sandbox.bugs.reference import Difference, first_difference
from sandbox.result import Diagnosis


@dataclass
class Rank:
    rank: int
    output: str = ""
    error: dict | None = None
    value: object = None


@dataclass
class Result:
    verdict: str
    ranks: list
    diagnosis: Diagnosis = field(default_factory=lambda: Diagnosis(kind="none", cause=""))

    @property
    def world_size(self) -> int:
        return len(self.ranks)


def hang(kind="collective_mismatch", culprits=(2,), world=4, **rank_fields) -> Result:
    ranks = [Rank(r, **rank_fields) for r in range(world)]
    return Result("hang", ranks, Diagnosis(kind=kind, cause="Collective mismatch at call #1", culprit_ranks=list(culprits)))


def judged(expect: dict, res, **kw) -> tuple[bool, list[str]]:
    why = unmet_expectations(Expect(**expect), res, **kw)
    return not why, why


def ok_run(values, reference=None) -> Result:
    ranks = [Rank(r, value={"value": v}) for r, v in enumerate(values)]
    if reference is not None:
        ranks[0].value["reference"] = reference
    return Result("ok", ranks)


# ------------------------------------------------------------------------------------------------ verdict

def test_a_right_hang_is_accepted():
    assert judged({"verdict": "hang", "kind": "collective_mismatch", "culprits": [2]}, hang()) == (True, [])


def test_a_wrong_verdict_is_rejected():
    ok, why = judged({"verdict": "hang"}, ok_run([1, 1]))
    assert not ok and why == ["verdict ok, expected hang"]


def test_any_of_several_verdicts():
    expect = {"verdict": ("hang", "crash")}
    assert judged(expect, hang())[0]
    ok, why = judged(expect, Result("error", [Rank(0)]))
    assert not ok and why == ["verdict error, expected hang or crash"]


def test_debug_lets_torchs_own_check_turn_a_hang_into_an_error_or_crash():
    for verdict in ("error", "crash"):
        res = Result(verdict, [Rank(0), Rank(1)])
        assert not judged({"verdict": "hang"}, res)[0]
        assert judged({"verdict": "hang"}, res, debug=True)[0]
    # but not into anything at all, and not for a variant that must succeed
    assert not judged({"verdict": "hang"}, Result("timeout", [Rank(0)]), debug=True)[0]
    assert not judged({"verdict": "ok"}, Result("error", [Rank(0)]), debug=True)[0]


# ------------------------------------------------------------------------------------------------ diagnosis

def test_a_wrong_kind_is_rejected():
    ok, why = judged({"verdict": "hang", "kind": "collective_mismatch"}, hang(kind="missing_ranks"))
    assert not ok and why == ["diagnosis missing_ranks, expected collective_mismatch"]


def test_no_kind_expected_takes_any_kind():
    assert judged({"verdict": "hang"}, hang(kind="missing_ranks"))[0]


@pytest.mark.parametrize("culprits,got,accepted", [
    ([2], [2], True),
    ([2], [1], False),
    ([2], [2, 3], False),
    ([2], [], False),
    ("others", [1, 2, 3], True),   # every rank but 0, at this world size
    ("others", [1, 2], False),
    ("others", [0, 1, 2, 3], False),
    ([], [], True),                # "no culprit" is a statement too
    ([], [0], False),
])
def test_culprits(culprits, got, accepted):
    ok, why = judged({"verdict": "hang", "culprits": culprits}, hang(culprits=got))
    assert ok is accepted, why
    if not accepted:
        assert why[0].startswith(f"culprits {got}, expected")


def test_others_follows_the_world_size():
    assert judged({"verdict": "hang", "culprits": "others"}, hang(culprits=[1], world=2))[0]
    assert not judged({"verdict": "hang", "culprits": "others"}, hang(culprits=[1], world=3))[0]


# ------------------------------------------------------------------------------------------------ error and output

def test_an_error_that_does_not_match_is_rejected():
    res = Result("error", [Rank(0, error={"message": "Connection reset by peer"}), Rank(1)])
    assert judged({"verdict": "error", "error": "Connection (reset|closed)"}, res)[0]
    ok, why = judged({"verdict": "error", "error": "No backend type associated"}, res)
    assert not ok and why == ["no rank's error matches /No backend type associated/"]


def test_the_error_may_show_in_output_or_in_the_summary():
    in_output = Result("error", [Rank(0, output="RuntimeError: No backend type associated with xpu"), Rank(1)])
    assert judged({"verdict": "error", "error": "No backend type"}, in_output)[0]
    res = hang()
    in_summary = dataclasses.replace(res, diagnosis=res.diagnosis.led_by("Rank 3 raised ValueError: bad shape"))
    assert judged({"verdict": "hang", "error": "bad shape"}, in_summary)[0]


def test_an_output_that_does_not_match_is_rejected():
    res = hang(output="Before new_group tp\n")
    assert judged({"verdict": "hang", "output": r"Before new_group tp"}, res)[0]
    ok, why = judged({"verdict": "hang", "output": r"After new_group tp"}, res)
    assert not ok and why == ["no rank's output matches /After new_group tp/"]


def test_output_is_not_matched_against_errors():
    res = Result("error", [Rank(0, error={"message": "sent_tokens=0"}), Rank(1)])
    assert not judged({"verdict": "error", "output": "sent_tokens=0"}, res)[0]


# ------------------------------------------------------------------------------------------------ reference

def test_values_equal_to_a_common_reference_are_accepted():
    res = ok_run([[1.0, 2.0], [1.0, 2.0]], reference=[1.0, 2.0 + 1e-7])  # float32 sums in another order
    assert judged({"matches_reference": True}, res) == (True, [])


def test_a_value_off_the_common_reference_is_rejected():
    ok, why = judged({"matches_reference": True}, ok_run([[1.0, 2.0], [1.0, 2.5]], reference=[1.0, 2.0]))
    assert not ok and why == ["rank 1 returned a wrong value: [1] is 2.5, the single-process reference has 2.0"]


def test_per_rank_reference():
    ref = {"per_rank": [{"tp": [0, 1]}, {"tp": [0, 1]}, {"tp": [2, 3]}]}
    assert judged({"matches_reference": True}, ok_run([{"tp": [0, 1]}, {"tp": [0, 1]}, {"tp": [2, 3]}], ref))[0]
    ok, why = judged({"matches_reference": True}, ok_run([{"tp": [0, 1]}, {"tp": [0, 1]}, {"tp": [0, 1]}], ref))
    assert not ok and why == ["rank 2 returned a wrong value: ['tp'][0] is 0, the single-process reference has 2"]


def test_a_reference_passed_in_wins_over_the_ranks_own():
    res = ok_run([3, 3], reference=3)
    assert judged({"matches_reference": True}, res)[0]
    assert not judged({"matches_reference": True}, res, reference=4)[0]


def test_no_reference_at_all_is_rejected():
    ok, why = judged({"matches_reference": True}, ok_run([3, 3]))
    assert not ok and why == ["no reference to compare with"]


def test_values_are_not_compared_unless_asked():
    assert judged({}, ok_run([3, 4], reference=3))[0]


def test_a_silent_bug_must_differ_from_the_reference():
    """A broken variant that finishes (sampler-set-epoch: every epoch visits the data in the same order) is as
    documented only when its answer is wrong: a run that happened to be right must be rejected."""
    expect = {"verdict": "ok", "differs_from_reference": True}
    ref = {"per_rank": [{"epoch 1": [3, 1]}, {"epoch 1": [2, 0]}]}
    assert judged(expect, ok_run([{"epoch 1": [1, 3]}, {"epoch 1": [2, 0]}], ref)) == (True, [])  # rank 0 differs
    ok, why = judged(expect, ok_run([{"epoch 1": [3, 1]}, {"epoch 1": [2, 0]}], ref))
    assert not ok and why == ["every rank's value equals the single-process reference, so the wrong answer did not show"]


def test_a_silent_bug_without_a_reference_is_rejected():
    ok, why = judged({"differs_from_reference": True}, ok_run([3, 4]))
    assert not ok and why == ["no reference to compare with"]
    assert judged({"differs_from_reference": True}, ok_run([3, 4]), reference=3)[0]  # one passed in counts
    assert not judged({"differs_from_reference": True}, ok_run([3, 3]), reference=3)[0]


def test_a_silent_bug_that_does_not_finish_is_judged_by_its_verdict_alone():
    ok, why = judged({"verdict": "ok", "differs_from_reference": True}, hang())
    assert not ok and why == ["verdict hang, expected ok"]


def test_describe_says_what_a_silent_bug_shows():
    assert Expect("ok", differs_from_reference=True).describe() == "ok, != single-process reference"
    assert Expect("ok", matches_reference=True).describe() == "ok, = single-process reference"


def test_several_failures_are_all_named():
    ok, why = judged({"verdict": "hang", "kind": "p2p_cycle", "culprits": [1], "error": "nope", "output": "nope"},
                     Result("error", [Rank(0), Rank(1)], Diagnosis(kind="rank_error", cause="boom", culprit_ranks=[0])))
    assert not ok and len(why) == 5


# ------------------------------------------------------------------------------------------------ the comparison

def test_the_place_and_both_values_are_named():
    d = Difference(1, *first_difference({"sent_tokens": 74, "total": 37}, {"sent_tokens": 37, "total": 37}))
    assert d.sentence() == "returned a wrong value: ['sent_tokens'] is 74, the single-process reference has 37"
    whole = Difference(0, *first_difference(None, [1.0]))
    assert whole.sentence() == "returned None, the single-process reference is [1.0]"


@pytest.mark.parametrize("got,want,where", [
    ([0.0, 1.0, 0.0], [0.0, 1.0], ""),               # lists: their lengths first
    ([[1, 2], [3]], [[1, 2], [3, 4]], "[1]"),
    ({"a": 1}, {"b": 1}, ""),                        # dicts: their keys
    (3, 3.0, ""),                                    # as assert_close: an int is not a float
    (True, 1, ""),
    (float("nan"), float("nan"), ""),                # equal_nan=False
    (37.0, 37.001, ""),                              # beyond float32's tolerance
    ("sent", "done", ""),
])
def test_what_differs(got, want, where):
    assert first_difference(got, want) == (where, got[1] if where == "[1]" else got, want[1] if where == "[1]" else want)


@pytest.mark.parametrize("got,want", [
    ([1.0, 2.0 + 2e-6], [1.0, 2.0]),                 # float32 sums in another order: the last bits
    (37.00003, 37.0),                                # within rtol 1.3e-6 * 37 + atol 1e-5
    (float("inf"), float("inf")),
    ({"per": [1, 2], "x": None}, {"per": [1, 2], "x": None}),
    ((1, 2), [1, 2]),                                # a tuple and a list of the same items
])
def test_what_is_the_same(got, want):
    assert first_difference(got, want) is None


def test_tensors_are_compared_by_assert_close():
    torch = pytest.importorskip("torch")
    assert first_difference([torch.ones(3)], [torch.ones(3) + 1e-7]) is None
    assert first_difference([torch.ones(3)], [torch.ones(3) + 1e-3])[0] == "[0]"
    assert first_difference(torch.ones(3), torch.ones(4))[0] == ""       # shapes differ
    assert first_difference(torch.ones(3), torch.ones(3, dtype=torch.float64))[0] == ""  # dtypes differ
