"""The call contract on real gloo ranks: a call that differs only in dtype gets the same verdict live, from the
trace directory (`python -m sandbox.diagnose DIR` and the judge on its tracks) and, where gloo completes it, from
the contracts; the advice for a point-to-point cycle holds on 3 ranks; and sites inside the project are shown
relative to it from any working directory."""
import json
import os

import pytest

import scenarios
from conftest import ROOT, run_cli
from sandbox import _paths, launch, policy
from sandbox.diagnose import P2P_ADVICE
from sandbox.diagnose.__main__ import load_result
from sandbox.events import load_dir


def _line_of(fn, text):
    import inspect
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if text in line)


SITE = f"tests/scenarios.py:{_line_of(scenarios.dtype_mismatch, 'dist.all_reduce(t)')}"


def _said_as_a_mismatch_of_rank_2(d):
    assert (d.kind, d.culprit_ranks, d.op, d.seq, d.site) == ("collective_mismatch", [2], "all_reduce", 1, SITE), \
        d.summary
    assert d.details["differs_in"] == ["dtype"]
    assert (f"ranks 0, 1 and 3 call all_reduce(shape [4], float32) at {SITE}; rank 2 calls all_reduce(shape [4],"
            f" float64) at {SITE}. The dtype must be the same on every rank of the group.") in d.summary, d.summary


def test_a_dtype_only_mismatch_is_named_as_one_live_and_offline(tmp_path, clean):
    live = launch(scenarios.dtype_mismatch, world_size=4, trace_dir=str(tmp_path), timeout=60)
    assert live.verdict in ("crash", "hang"), live.diagnosis.summary  # gloo aborts on the size, or waits
    _said_as_a_mismatch_of_rank_2(live.diagnosis)
    off = load_result(str(tmp_path))
    assert off.verdict in ("crash", "hang")
    _said_as_a_mismatch_of_rank_2(off.diagnosis)
    j = policy.judge(policy.fill_missing(load_dir(str(tmp_path))))
    _said_as_a_mismatch_of_rank_2(j.diagnosis)
    p = run_cli("sandbox.diagnose", "--json", str(tmp_path))
    d = json.loads(p.stdout)["diagnosis"]
    assert p.returncode == 1 and (d["kind"], d["culprit_ranks"], d["details"]["differs_in"]) == (
        "collective_mismatch", [2], ["dtype"])


def test_a_dtype_only_difference_gloo_completes_is_a_contract_warning_naming_the_rank(tmp_path, clean):
    live = launch(scenarios.dtype_mismatch, world_size=4, args=("int32",), trace_dir=str(tmp_path), timeout=60)
    assert live.verdict == "ok", live.diagnosis.summary  # the same bytes on the wire: gloo pairs the calls
    for res in (live, load_result(str(tmp_path))):
        [w] = res.warnings
        assert (w.kind, w.op, w.seq, w.details["differs_in"], w.details["odd_ranks"]) == (
            "collective_differs", "all_reduce", 1, ["dtype"], [2])
        assert (f"ranks 0, 1 and 3 called all_reduce(shape [4], float32, SUM) at {SITE}; rank 2 called "
                f"all_reduce(shape [4], int32, SUM) at {SITE}") in w.summary, w.summary


# ------------------------------------------------------------------------------------------ p2p advice

def test_even_ranks_sending_first_deadlocks_on_three_ranks_and_the_advice_is_not_that(clean):
    res = launch(scenarios.ring_exchange, world_size=3, args=("even_first",), timeout=60)
    d = res.diagnosis
    assert (res.verdict, d.kind, d.culprit_ranks) == ("hang", "p2p_cycle", [0, 2]), d.summary
    assert d.summary.endswith(P2P_ADVICE.strip()) and "even ranks send first" not in d.summary


@pytest.mark.parametrize("how", ["isend_irecv", "batch"])
def test_the_advised_exchange_completes_on_three_ranks(how, clean):
    res = launch(scenarios.ring_exchange, world_size=3, args=(how,), timeout=60)
    assert res.verdict == "ok", res.diagnosis.summary
    assert res.values == [(2.0, 1.0), (0.0, 2.0), (1.0, 0.0)]  # (from the left, from the right) of ranks 0-2
    assert res.warnings == [], [w.summary for w in res.warnings]


# ------------------------------------------------------------------------------------------ shown paths

def test_a_project_path_is_shown_relative_to_the_project_from_any_directory(tmp_path, monkeypatch):
    kv = os.path.join(ROOT, "sandbox", "bugs", "kv_sync.py")
    elsewhere = tmp_path / "mine" / "train.py"
    for cwd in (ROOT, str(tmp_path), os.path.join(ROOT, "tests")):
        monkeypatch.chdir(cwd)
        assert _paths.shown_path(kv) == "sandbox/bugs/kv_sync.py", cwd
        assert _paths.resolve("sandbox/bugs/kv_sync.py") == kv
    monkeypatch.chdir(tmp_path)
    assert _paths.shown_path(str(elsewhere)) == "mine/train.py"  # a user's file: relative to where they are
    monkeypatch.chdir(ROOT)
    assert _paths.shown_path(str(elsewhere)) == str(elsewhere)   # outside both: as it is


def test_sites_from_another_working_directory_are_the_projects(tmp_path, monkeypatch, clean):
    monkeypatch.chdir(tmp_path)
    res = launch(scenarios.op_mismatch, world_size=3, timeout=60)
    d = res.diagnosis
    line = _line_of(scenarios.op_mismatch, "dist.all_gather")
    assert (d.kind, d.site) == ("collective_mismatch", f"tests/scenarios.py:{line}"), d.summary
    # the rank-dependent `if` is found from that shown site and a hung rank's stack, and shown the same way
    assert d.details["branch"]["site"] == f"tests/scenarios.py:{line - 1}", d.details
    assert all(r.pending["site"].startswith("tests/scenarios.py:") for r in res.ranks), [r.pending for r in res.ranks]
    from sandbox.words import stack_top
    assert all(stack_top(r.stack).startswith("tests/scenarios.py:") for r in res.ranks)  # a hung rank's stack too
