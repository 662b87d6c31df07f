"""The capstone's check (sandbox/course/capstone.py) on real 4-rank gloo runs: it finds both bugs in the script as
given, names the one a partial fix leaves, accepts both ways of fixing the evaluation bug, and its single-process
reference is what the fixed script computes."""
import json
import os

import pytest

from sandbox.course import capstone


@pytest.fixture
def script(tmp_path):
    return lambda name, fixes=(): capstone.solution(str(tmp_path / name), fixes=fixes)


def test_the_script_as_given_has_both_bugs(script, clean):
    v = capstone.check(script("train.py"))
    assert not v.ok and v.found == [], str(v)
    assert str(v).startswith("You fixed 0 of 2 bugs."), str(v)
    assert "collective_mismatch" not in str(v) and "Collective mismatch" in str(v)  # the sandbox's own words


def test_a_partial_fix_is_told_which_bug_is_left(script, clean):
    v = capstone.check(script("eval_only.py", fixes=capstone.FIXES[1:]))
    assert v.found == ["evaluation"] and not v.ok, str(v)
    assert "You fixed 1 of 2 bugs." in str(v)


def test_the_answer_fixes_both_and_matches_the_reference(script, clean):
    v = capstone.check(script("fixed.py", fixes=capstone.FIXES))
    assert v.ok and sorted(v.found) == ["evaluation", "uneven shares"], str(v)


def test_exercise_1_rank_0_evaluates_alone_without_a_collective(script, clean):
    path = script("alone.py", fixes=capstone.FIXES[:1])
    text = open(path).read()
    old = "    dist.all_reduce(loss)\n    return loss.item() / dist.get_world_size()\n"
    assert old in text
    with open(path, "w") as f:
        f.write(text.replace(old, "    return loss.item()\n"))
    what, argv, bug = capstone.TRIALS[0]  # the trial that isolates the evaluation bug
    trial = capstone.run_trial(path, what, argv, bug)
    assert trial.fixed, trial.said


def test_the_copy_is_not_written_over_an_edited_one(tmp_path):
    dest = tmp_path / "my_train.py"
    dest.write_text("# edited\n")
    assert capstone.copy_script(str(dest)) == str(dest) and dest.read_text() == "# edited\n"
    with pytest.raises(FileNotFoundError, match="copy it first"):
        capstone.check(str(tmp_path / "missing.py"))


def test_the_answer_edits_still_apply_to_the_script(tmp_path):
    assert "-    mine = list(range(rank, args.samples, world))" in capstone.solution_diff()
    with pytest.raises(ValueError, match="no longer contains"):
        capstone.solution(str(tmp_path / "x.py"), fixes=[("no such line\n", "")])
    assert not os.path.exists(tmp_path / "x.py")


ATTEMPTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "capstone_attempts")
with open(os.path.join(ATTEMPTS, "MANIFEST.json")) as _f:
    MANIFEST = json.load(_f)


@pytest.mark.parametrize("entry", MANIFEST, ids=[e["file"].removesuffix(".py") for e in MANIFEST])
def test_the_check_tells_a_right_fix_from_a_wrong_one(entry, clean):
    """Fixes a learner writes (tests/data/capstone_attempts, written from labs 11 and 26 and the script by someone
    who had not read the check): the tail dropped, padded or joined with zeros, DDP, a count agreed with MIN, are
    accepted; training alone without communication, a rank that drops or skips on its own, a wrong average, are
    not."""
    v = capstone.check(os.path.join(ATTEMPTS, entry["file"]))
    if entry["verdict"] == "correct":
        assert v.ok, f"{entry['file']} ({entry['why']}) was refused:\n{v}"
    else:
        assert not v.ok, f"{entry['file']} ({entry['why']}) was accepted:\n{v}"
